"""``python -m astrai.generate --engine vllm`` (``make test-vllm``): vLLM's greedy answers equal
astrai's sampler's on the same model directory, a seed repeats its samples and another seed
draws others, the engine's export directory is gone when generate returns, and a head size the
CPU kernel lacks is one line before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from tests.helpers import run_main

from astrai.generate import main as generate_main
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.pretrained import save_policy_dir
from astrai.models.tokenizer import CharTokenizer

pytestmark = pytest.mark.vllm

# prompts of 5 to 9 tokens (BOS included): left padding differs from row to row
PROMPTS = ["1+2=", "12+34=", "7+0=", "105+96=", "8+88="]
# vLLM's CPU attention kernel has no head size 16 (the tiny presets'): 2 heads of 32 instead
HEADS = {"num_attention_heads": 2, "num_key_value_heads": 1}


def _model_dir(directory: Path, **config: int | float) -> Path:
    torch.manual_seed(0)
    # a larger init than training's, so logits are far from uniform and a wrong weight shows
    policy = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, initializer_range=0.2, **config))
    save_policy_dir(policy.eval(), CharTokenizer(), directory)
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _model_dir(tmp_path_factory.mktemp("model"), **HEADS)


@pytest.fixture
def exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the engine writes its policy export (``tempfile``'s directory), to see it go."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _answers(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if " -> " in line]


def _header(stdout: str) -> str:
    """The settings line (vLLM may have logged to this process's stdout in an earlier test)."""
    return next(line for line in stdout.splitlines() if line.startswith("# max_new_tokens"))


def test_greedy_vllm_answers_equal_the_torch_samplers(model_dir: Path, tmp_path: Path) -> None:
    """The vLLM run is the real entry point in a process of its own: its stdout holds only
    generate's lines (vLLM's log goes to stderr), and its export directory is gone after."""
    args = [str(model_dir), *PROMPTS, "--max-new-tokens", "16"]
    reference = run_main(generate_main, args)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    served = subprocess.run(
        [sys.executable, "-m", "astrai.generate", *args, "--engine", "vllm"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert reference.returncode == 0 and served.returncode == 0, served.stderr[-3000:]
    lines = served.stdout.splitlines()
    assert lines[1:2] == ["# max_new_tokens 16, greedy, vllm float32"], served.stdout[-3000:]
    assert len(lines) == 2 + len(PROMPTS)  # nothing but generate's lines
    assert _answers(served.stdout) == _answers(reference.stdout)
    assert len(set(_answers(reference.stdout))) == len(PROMPTS)  # a real comparison
    assert not list(tmp_path.glob("astrai-vllm-*"))  # the engine was closed


def test_a_seed_repeats_its_samples_and_another_seed_draws_others(model_dir: Path) -> None:
    args = [str(model_dir), "1+2=", "105+96=", "--engine", "vllm", "--temperature", "1"]
    args += ["--n", "4", "--max-new-tokens", "8"]
    first, again, other = (run_main(generate_main, [*args, "--seed", s]) for s in "334")
    assert first.returncode == 0, first.stderr[-3000:]
    assert _header(first.stdout) == "# max_new_tokens 8, temperature 1.0, vllm float32"
    assert _answers(again.stdout) == _answers(first.stdout)
    assert _answers(other.stdout) != _answers(first.stdout)
    assert len(set(_answers(first.stdout)[:4])) > 1  # a group's samples differ


def test_a_head_size_the_cpu_kernel_lacks_is_one_line_before_anything_starts(
    tmp_path: Path, exports: Path
) -> None:
    (tmp_path / "tiny").mkdir()
    source = _model_dir(tmp_path / "tiny")  # model=tiny's 4 heads of 16
    result = run_main(generate_main, [str(source), "1+2=", "--engine", "vllm"])
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("astrai.generate: --engine vllm: vLLM's CPU attention has no ")
    assert "head_dim=16" in lines[0] and lines[0].endswith("sample this model with --engine torch")
    assert not list(exports.glob("astrai-vllm-*"))
