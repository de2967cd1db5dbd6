"""The ``engine`` seam: ``engine=torch`` is astrai's sampler exactly, and the trainer samples
through whatever engine its config names."""

from __future__ import annotations

import logging
from dataclasses import fields
from types import SimpleNamespace

import pytest
import torch
from tests.helpers import compose_config

from astrai.config.schema import TorchEngineSchema, VLLMEngineSchema
from astrai.config.validate import ConfigError
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout import seeded_vllm
from astrai.rollout.collect import left_pad
from astrai.rollout.engine import TorchEngine, build_engine, torch_engine
from astrai.rollout.sampler import SamplingConfig, generate
from astrai.rollout.seeded_vllm import SeededVLLM, precision_notice
from astrai.rollout.vllm_engine import VLLMEngineConfig

# the keys of every engine node (config.schema.EngineConfig)
ENGINE_KEYS = ["_target_", "old_logprobs", "correction", "correction_low", "correction_high"]


def test_the_torch_engine_is_the_sampler_with_each_prompt_repeated_group_size_times() -> None:
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig(initializer_range=0.2)).eval()
    tokenizer = CharTokenizer()
    ids, mask = left_pad(tokenizer, ["1+2=", "13+4=", "7+7="])
    sampling = SamplingConfig(max_new_tokens=6, temperature=1.0)
    engine = torch_engine(policy, tokenizer)
    ours = engine.sample(
        ids, mask, 4, sampling, tokenizer.stop_ids, generator=torch.Generator().manual_seed(3)
    )
    reference = generate(
        policy, ids.repeat_interleave(4, 0), mask.repeat_interleave(4, 0), sampling,
        tokenizer.stop_ids, tokenizer.pad_id, generator=torch.Generator().manual_seed(3),
    )  # fmt: skip
    assert ours.response_ids.shape[0] == 12  # prompt-major: rows 0-3 answer prompt 0
    for name in ("response_ids", "response_mask", "logprobs"):
        assert torch.equal(getattr(ours, name), getattr(reference, name)), name
    assert engine.samples_live_policy and engine.on(policy) is engine


def test_the_config_names_the_engine_class() -> None:
    cfg = compose_config(["debug=quick"])
    assert cfg.engine._target_ == "astrai.rollout.engine.TorchEngine"
    policy = LlamaForCausalLM(LlamaConfig())
    engine = build_engine(cfg.engine, policy, CharTokenizer(), "bf16")
    assert isinstance(engine, TorchEngine) and engine.policy is policy
    assert (engine.precision, engine.lockstep) == ("bf16", False)
    with pytest.raises(
        ConfigError, match=r"engine._target_='astrai.rollout.sglang.SGLang' cannot be imported"
    ):
        compose_config(["debug=quick", "engine._target_=astrai.rollout.sglang.SGLang"])
    with pytest.raises(ConfigError, match=r"engine._target_='torch.nn.Linear' is not an engine"):
        compose_config(["debug=quick", "engine._target_=torch.nn.Linear"])


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("engine.dtype=fp8", "engine.dtype='fp8' is not one of float32, bfloat16, float16"),
        ("engine.kv_cache_space_gib=0", "engine.kv_cache_space_gib"),
        ("engine.gpu_memory_utilization=0", r"engine.gpu_memory_utilization must be in \(0, 1\]"),
        ("engine.gpu_memory_utilization=1.5", "engine.gpu_memory_utilization must be in"),
        ("engine.max_model_len=8", r"engine.max_model_len \(8\) is below the longest prompt"),
        ("engine.max_model_len=4096", "engine.max_model_len"),  # beyond the model's 64
        (
            "infra.nproc_per_node=2 infra.parallel=fsdp",
            "engine=vllm takes its weights from each rank's full replica: infra.parallel=fsdp",
        ),
    ],
)
def test_bad_vllm_options_are_one_line_before_any_engine_starts(override: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        compose_config(["debug=quick", "engine=vllm", *override.split()])


def test_engine_vllm_without_vllm_names_the_install_command() -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:  # the vllm lane's venv: it validates
        compose_config(["debug=quick", "engine=vllm"])
        return
    with pytest.raises(ConfigError, match=r"engine=vllm needs vLLM.*make install-vllm"):
        compose_config(["debug=quick", "engine=vllm"])


def test_engine_vllm_on_cuda_is_refused_until_its_memory_is_managed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # as on a GPU machine
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # (tests/conftest.py hides them)
    with pytest.raises(ConfigError, match="engine=vllm runs on the CPU only for now"):
        compose_config(["debug=quick", "engine=vllm", "infra.device=cuda"])
    with pytest.raises(ConfigError, match="engine=vllm runs on the CPU only for now"):
        compose_config(["debug=quick", "engine=vllm"])  # infra.device=auto picks the GPU


def test_the_engines_facts_are_class_attributes() -> None:
    facts = ("samples_live_policy", "supports_seeds", "supports_prefix_continuation")
    assert [getattr(TorchEngine, fact) for fact in facts] == [True, False, True]
    assert [getattr(SeededVLLM, fact) for fact in facts] == [False, True, True]
    # vLLM's knobs are written once, on its class: the schema is derived from them
    knobs = [f.name for f in fields(SeededVLLM.Config)]
    assert [f.name for f in fields(VLLMEngineSchema)] == [*ENGINE_KEYS, *knobs]
    assert [f.name for f in fields(TorchEngineSchema)] == ENGINE_KEYS


def test_vllm_sampling_in_another_precision_than_the_trainer_says_so_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert precision_notice("float32", "fp32") is None
    assert precision_notice("bfloat16", "bf16") is None
    line = precision_notice("float32", "bf16")
    assert line is not None and line.startswith("engine=vllm samples in engine.dtype=float32")
    assert line.endswith("set engine.dtype=bfloat16 to sample in the trainer's precision")
    monkeypatch.setattr(seeded_vllm, "VLLMEngine", lambda *args: SimpleNamespace(close=dict))
    policy = LlamaForCausalLM(LlamaConfig())
    with caplog.at_level(logging.WARNING, logger=seeded_vllm.__name__):
        SeededVLLM(VLLMEngineConfig(), policy, CharTokenizer(), "bf16")
        SeededVLLM(VLLMEngineConfig(dtype="bfloat16"), policy, CharTokenizer(), "bf16")
    assert caplog.messages == [line]
