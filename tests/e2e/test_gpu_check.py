"""``make gpu-check`` (bench/gpu_check.py): without CUDA every check a SKIP row of the printed
table, by name, and exit 0; its checks, run on the CPU through the hidden ``--device cpu
--quick`` mode, pass and land in the summary; a failing check fails the run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from tests.helpers import script_module

from astrai.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "gpu_check.py"
# every check but SmolLM2's, whose run depends on models/smollm2 having been converted here
# (``lora``: its resume part; its SmolLM2 step runs on CUDA only; ``async``: its resume part,
# its timing on CUDA only)
CPU_CHECKS = [
    "grpo-learns",
    "ppo-learns",
    "bf16",
    "micro-batching",
    "resume",
    "lora",
    "async",
    "episodes",
    "scale-memory",  # on the CPU: issue 48's spot check, the scoring pass's estimate vs RSS
    "causal-attention",  # on the CPU the mask stays; is_causal forced to compare the logits
    "mfu",  # one layer of Qwen3-0.6B against a measured matmul
    "2-process-ddp",
]


@pytest.fixture(scope="module")
def gpu_check() -> Iterator[ModuleType]:
    """The script as a module (bench/ is no package)."""
    with script_module(SCRIPT, "gpu_check") as module:
        yield module


def run_script(*args: str | Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.skipif(
    torch.cuda.is_available() or Path("/dev/nvidiactl").exists(), reason="a GPU is here"
)
def test_without_cuda_every_check_skips_by_name_and_exit_0(
    gpu_check: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the script's main in this process (a child process costs a torch import and ~4 s)
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--summary", str(tmp_path / "summary.json")])
    assert gpu_check.main() == 0
    out = capsys.readouterr().out.splitlines()
    names = [name for name, _ in gpu_check.CHECKS]
    assert f"gpu-check: no CUDA device on this machine (torch {torch.__version__}): every check" \
        " skipped" in out  # fmt: skip
    rows = [line for line in out if line.startswith("| `")]
    assert rows == [f"| `{name}` | SKIP | no CUDA device on this machine | 0.0 |" for name in names]
    assert out[-1].startswith(f"gpu-check: 0 passed, 0 failed, {len(names)} skipped")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [c["name"] for c in summary["checks"]] == names and summary["passed"] is True


@pytest.mark.slow  # ~25 s: every check's RL runs, on the CPU
def test_checks_pass_on_the_cpu_and_fill_the_summary(tmp_path: Path) -> None:
    summary_path = tmp_path / "out" / "summary.json"
    result = run_script(
        "--device", "cpu", "--quick", "--threads", "1", "--only", *CPU_CHECKS,
        "--summary", summary_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    statuses = [line.split(":")[0] for line in lines if line.startswith(("PASS", "FAIL", "SKIP"))]
    expected = [f"PASS {name}" for name in CPU_CHECKS[:-1]] + ["SKIP 2-process-ddp"]
    assert statuses == expected, result.stdout
    assert result.stdout.splitlines()[-1].startswith("gpu-check: 11 passed, 0 failed, 1 skipped")
    summary = json.loads(summary_path.read_text())
    assert summary["passed"] is True and summary["quick"] is True
    checks = {c["name"]: c for c in summary["checks"]}
    assert list(checks) == CPU_CHECKS
    for name in ("grpo-learns", "ppo-learns", "bf16"):
        numbers = checks[name]["numbers"]
        assert numbers["reward_last5"] - numbers["reward_first3"] >= 0.05, name
    micro = checks["micro-batching"]["numbers"]
    assert micro["online_grpo_max_diff"] <= 1e-5 and micro["online_ppo_max_diff"] <= 1e-5
    lora = checks["lora"]["numbers"]
    assert lora["online_grpo_max_diff"] == 0.0 and lora["online_ppo_max_diff"] == 0.0
    assert checks["async"]["numbers"]["resume_max_diff"] == 0.0  # a rollout in flight
    episodes = checks["episodes"]["numbers"]  # an episode rollout in flight at lag 1
    assert episodes["grpo_max_diff"] == 0.0 and episodes["ppo_lag1_max_diff"] == 0.0
    assert len(episodes["bf16_turns"]) == 3 and min(episodes["bf16_turns"]) >= 1
    spot = checks["scale-memory"]["numbers"]  # fake tensors vs a real run
    assert list(spot) == ["grpo/score", "ppo-lora16/update"]
    for phase in spot.values():
        assert abs(phase["ratio"] - 1) <= 0.10 and phase["measured_bytes"] > 50 * 2**20
    mfu = checks["mfu"]["numbers"]["qwen3-0.6b"]
    assert mfu["peak_source"] == "measured matmul" and mfu["mfu"] > 0 and mfu["tokens_per_s"] > 0
    causal = checks["causal-attention"]["numbers"]
    assert causal["causal_taken"] is False  # the CPU keeps the dense mask
    assert causal["fp32"]["max_abs_diff"] <= 1e-3 and causal["bf16"]["max_abs_diff"] <= 0.1
    resume = checks["resume"]["numbers"]
    assert resume["online_grpo_bitwise"] and resume["online_ppo_bitwise"]  # exact on the CPU
    table = summary_path.with_suffix(".md").read_text()
    assert "| `resume` | PASS |" in table and "| `2-process-ddp` | SKIP | --quick |" in table


def test_a_raising_check_is_a_fail_line_and_exit_1(
    gpu_check: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fine(ctx: object) -> object:
        return gpu_check.Result("fine", "PASS", "ok")

    def broken(ctx: object) -> object:
        raise RuntimeError("CUDA error: an illegal memory access\nmore")

    monkeypatch.setattr(gpu_check, "CHECKS", [("broken", broken), ("fine", fine)])
    summary_path = tmp_path / "summary.json"
    argv = ["gpu_check.py", "--device", "cpu", "--summary", str(summary_path)]
    monkeypatch.setattr(sys, "argv", argv)
    assert gpu_check.main() == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("FAIL broken: RuntimeError: CUDA error: an illegal memory access [")
    assert lines[2].startswith("PASS fine: ok [")  # the other checks still run
    summary = json.loads(summary_path.read_text())
    assert summary["passed"] is False
    assert [c["status"] for c in summary["checks"]] == ["FAIL", "PASS"]


def test_max_state_diff_is_zero_only_when_bitwise(gpu_check: ModuleType) -> None:
    a = {"w": torch.tensor([1.0, 2.0]), "state": [{"step": 3, "lr": 0.5, "kl": math.nan}]}
    same = {"w": torch.tensor([1.0, 2.0]), "state": [{"step": 3, "lr": 0.5, "kl": math.nan}]}
    assert gpu_check.max_state_diff(a, same) == 0.0
    moved = {"w": torch.tensor([1.0, 2.25]), "state": [{"step": 3, "lr": 0.5, "kl": math.nan}]}
    assert gpu_check.max_state_diff(a, moved) == 0.25
    assert gpu_check.max_state_diff(a, {"w": a["w"]}) == math.inf  # a key missing
    assert gpu_check.max_state_diff({"w": a["w"]}, {"w": a["w"].double()}) == math.inf
    assert gpu_check.max_state_diff([{"step": 3}], [{"step": 4}]) == math.inf


@pytest.mark.parametrize("tied", [True, False])
def test_smollm2_shaped_weights_load_into_the_model_their_config_describes(tied: bool) -> None:
    """bench/smollm2_shaped.py: every name and shape astrai's loader expects, nothing else."""
    from astrai.models.hf_config import hf_config_from_llama, llama_config_from_hf
    from astrai.models.llama import LlamaConfig, LlamaForCausalLM
    from astrai.models.pretrained import load_weights

    with script_module(SCRIPT.with_name("smollm2_shaped.py"), "smollm2_shaped") as shaped:
        shaped_weights = shaped.shaped_weights
    config = LlamaConfig(
        vocab_size=40, hidden_size=24, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=tied,
    )  # fmt: skip
    hf = hf_config_from_llama(config)
    weights = shaped_weights(hf)
    model = LlamaForCausalLM(llama_config_from_hf(hf))
    load_weights(model, dict(weights), Path("shaped"))  # raises on a missing or extra name
    assert ("lm_head.weight" in weights) is not tied
    embed = model.model.embed_tokens.weight
    assert torch.equal(embed, weights["model.embed_tokens.weight"])
    assert 0.015 < embed.std().item() < 0.025  # std 0.02 over 960 draws
    assert torch.equal(model.model.norm.weight, torch.ones(24))
