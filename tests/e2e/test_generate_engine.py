"""``python -m astrai.generate --engine`` without vLLM: ``torch`` is the sampler generate always
used, bit for bit; ``vllm``'s refusals are one line and exit 2 before the source is read; its
knobs come from the run's ``engine`` node or ``conf/engine/vllm.yaml``; the engine is closed also
when sampling fails. What vLLM itself answers: ``tests/engine/test_vllm_generate.py``."""

from __future__ import annotations

import importlib.util
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tests.helpers import compose_config, run_main

from astrai import generation_engine
from astrai.generate import main as generate_main
from astrai.generation_engine import check_engine, engine_config, sample_groups
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.pretrained import save_policy_dir
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import decode_responses, left_pad
from astrai.rollout.engines.sampler import SamplingConfig, generate
from astrai.rollout.engines.seeded_vllm import VLLM_INSTALL, SeededVLLM

PROMPTS = ["1+2=", "12+34=", "7+0="]  # different lengths: left padding differs per row


def _policy() -> LlamaForCausalLM:
    torch.manual_seed(0)
    # a larger init than training's: logits far from uniform, so answers differ per prompt
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, initializer_range=0.2)).eval()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("model")
    save_policy_dir(_policy(), CharTokenizer(), directory)
    return directory


def _completions(stdout: str) -> list[str]:
    return [line.partition(" -> ")[2] for line in stdout.splitlines() if " -> " in line]


def _reference(model_dir: Path, n: int, sampling: SamplingConfig, seed: int) -> list[str]:
    """What generate printed before ``--engine``: ``rollout.engines.sampler.generate`` on every
    prompt repeated ``n`` times, one generator seeded with ``seed``."""
    from astrai.checkpoints.policy import load_policy

    loaded = load_policy(model_dir)
    tokenizer = loaded.tokenizer
    ids, mask = left_pad(tokenizer, [p for p in PROMPTS for _ in range(n)])
    generator = torch.Generator().manual_seed(seed)
    args = (tokenizer.stop_ids, tokenizer.pad_id, generator)
    out = generate(loaded.policy, ids, mask, sampling, *args)
    return [repr(c) for c in decode_responses(tokenizer, out.response_ids, out.response_mask)]


@pytest.mark.parametrize(
    ("flags", "n", "sampling"),
    [
        ([], 1, SamplingConfig(max_new_tokens=8, temperature=0.0)),
        (["--temperature", "1", "--top-k", "5", "--n", "3"], 3, SamplingConfig(8, 1.0, 5)),
    ],
    ids=["greedy", "sampled"],
)
def test_engine_torch_is_the_sampler_generate_always_used(
    model_dir: Path, flags: list[str], n: int, sampling: SamplingConfig
) -> None:
    args = [str(model_dir), *PROMPTS, "--max-new-tokens", "8", "--seed", "5", *flags]
    default = run_main(generate_main, args)
    chosen = run_main(generate_main, [*args, "--engine", "torch"])
    assert default.returncode == 0 and chosen.returncode == 0, default.stderr + chosen.stderr
    assert chosen.stdout == default.stdout
    assert _completions(chosen.stdout) == _reference(model_dir, n, sampling, seed=5)
    assert len(set(_completions(chosen.stdout))) > 1  # not one answer everywhere


def _assert_refused(args: list[str], needle: str) -> None:
    result = run_main(generate_main, args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("astrai.generate: "), result.stderr
    assert needle in lines[0], lines[0]
    assert result.stdout == ""


# the source does not exist: each refusal comes before anything is read
@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--seed", "-1"], "--engine vllm: --seed must be in [0, 2**62) (got -1)"),
    ],
)
def test_engine_vllm_refusals_are_one_line(tmp_path: Path, flags: list[str], needle: str) -> None:
    _assert_refused([str(tmp_path / "missing"), "1+1=", "--engine", "vllm", *flags], needle)


def test_engine_vllm_without_vllm_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "vllm" else find_spec(name, *a),
    )
    needle = f"--engine vllm needs vLLM, which is not installed: {VLLM_INSTALL}"
    _assert_refused([str(tmp_path / "missing"), "1+1=", "--engine", "vllm"], needle)
    assert "make install-vllm" in needle


def test_an_unknown_engine_is_refused_by_name(tmp_path: Path) -> None:
    args = [str(tmp_path / "missing"), "1+1=", "--engine", "sglang"]
    _assert_refused(args, "argument --engine: invalid choice: 'sglang'")


VLLM_KNOBS = [f.name for f in fields(SeededVLLM.Config)]


def test_vllm_knobs_are_the_defaults_or_the_runs_own() -> None:
    defaults = compose_config(["engine=vllm"], validate=False).engine
    node = engine_config("vllm", None, seed=11, precision=None)
    assert node is not None and node.seed == 11  # --seed, not the composed run seed
    assert {k: node[k] for k in VLLM_KNOBS if k != "seed"} == {
        k: defaults[k] for k in VLLM_KNOBS if k != "seed"
    }
    ran = {"name": "vllm", "dtype": "bfloat16", "max_model_len": 48, "kv_cache_space_gib": 2}
    run = OmegaConf.create({"seed": 3, "engine": {**ran, "seed": 3}})
    node = engine_config("vllm", run, seed=11, precision=None)
    assert node is not None
    assert (node.dtype, node.max_model_len, node.kv_cache_space_gib, node.seed) == (
        "bfloat16",
        48,
        2,
        11,
    )
    assert node.enable_prefix_caching == defaults.enable_prefix_caching  # absent: the default
    assert engine_config("vllm", run, seed=11, precision="fp32").dtype == "float32"  # flag wins
    torch_run = OmegaConf.create({"engine": {"name": "torch"}})
    assert engine_config("vllm", torch_run, seed=0, precision=None).dtype == defaults.dtype
    assert dict(engine_config("torch", run, seed=0, precision="bf16")) == {  # no knobs
        k: v for k, v in compose_config([], validate=False).engine.items()
    }


def test_a_length_past_the_engines_max_model_len_is_one_line() -> None:
    node = OmegaConf.create(
        {"_target_": "astrai.rollout.engines.seeded_vllm.SeededVLLM", "max_model_len": 12}
    )
    with pytest.raises(
        ValueError, match=r"\+ --max-new-tokens 5 pass the engine's max_model_len \(12"
    ):
        check_engine(node, _policy(), prompt_width=8, max_new_tokens=5)


class _FailingEngine:
    name = "failing"
    closed = 0

    def sample(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("the engine broke mid-sample")

    def close(self) -> None:
        self.closed += 1


def test_the_engine_is_closed_when_sampling_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _FailingEngine()
    monkeypatch.setattr(generation_engine, "build_engine", lambda *a: engine)
    tokenizer = CharTokenizer()
    ids, mask = left_pad(tokenizer, PROMPTS)
    with pytest.raises(RuntimeError, match="mid-sample"):
        sample_groups(None, _policy(), tokenizer, ids, mask, 2, SamplingConfig(4), 0, "fp32")
    assert engine.closed == 1
