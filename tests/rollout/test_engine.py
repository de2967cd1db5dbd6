"""The ``engine`` seam: ``engine=torch`` is astrai's sampler exactly, and the trainer samples
through whatever engine its config names."""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tests.helpers import compose_config

from astrai.config.schema import TorchEngineSchema, VLLMEngineSchema
from astrai.config.validate import ConfigError
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import left_pad
from astrai.rollout.engines import seeded_vllm
from astrai.rollout.engines.engine import EngineJob, TorchEngine, build_engine, torch_engine
from astrai.rollout.engines.sampler import SamplingConfig, generate
from astrai.rollout.engines.seeded_vllm import SeededVLLM, precision_notice
from astrai.rollout.engines.vllm_settings import VLLMEngineConfig, llm_kwargs, resolve

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
    assert cfg.engine._target_ == "astrai.rollout.engines.engine.TorchEngine"
    policy = LlamaForCausalLM(LlamaConfig())
    engine = build_engine(cfg.engine, policy, CharTokenizer(), "bf16")
    assert isinstance(engine, TorchEngine) and engine.policy is policy
    assert (engine.precision, engine.lockstep) == ("bf16", False)
    with pytest.raises(
        ConfigError, match=r"engine._target_ 'astrai.rollout.sglang.SGLang' cannot be imported"
    ):
        compose_config(["debug=quick", "engine._target_=astrai.rollout.sglang.SGLang"])
    with pytest.raises(ConfigError, match=r"engine._target_ 'torch.nn.Linear' is not an engine"):
        compose_config(["debug=quick", "engine._target_=torch.nn.Linear"])


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("engine.dtype=fp8", "engine.dtype='fp8' is not one of auto, float32, bfloat16, float16"),
        ("engine.sleep_mode=true", "engine.sleep_mode=true on the CPU: vLLM's sleep mode exists"),
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


def test_engine_vllm_on_cuda_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA device plan passes ``SeededVLLM.check`` (issue 49: the refusal is gone); vLLM
    itself is pretended installed, as on a GPU machine with it."""
    found = importlib.util.find_spec
    monkeypatch.setattr(
        seeded_vllm.importlib.util,
        "find_spec",
        lambda name, *args: SimpleNamespace() if name == "vllm" else found(name, *args),
    )
    job = EngineJob(device="cuda", max_new_tokens=8, longest_prompt=8)
    SeededVLLM.check({"sleep_mode": None, "max_model_len": None}, job)
    SeededVLLM.check({"sleep_mode": True}, EngineJob(device="cuda:1"))
    with pytest.raises(ValueError, match="sleep_mode=true on the CPU"):
        SeededVLLM.check({"sleep_mode": True}, EngineJob(device="cpu"))
    source = Path(seeded_vllm.__file__).read_text()
    assert "runs on the CPU only" not in source


def test_vllm_knobs_resolve_per_device_as_the_anchors_run_it() -> None:
    cpu = resolve(VLLMEngineConfig(), cuda=False, precision="fp32")
    assert (cpu.dtype, cpu.enforce_eager, cpu.sleep_mode, cpu.exact) == (
        "float32",
        True,
        False,
        True,
    )
    assert cpu.max_num_batched_tokens is None
    gpu = resolve(VLLMEngineConfig(), cuda=True, precision="bf16")
    assert (gpu.dtype, gpu.enforce_eager, gpu.sleep_mode, gpu.exact) == (
        "bfloat16",
        False,
        True,
        False,
    )
    assert gpu.max_num_batched_tokens == 4096
    chosen = resolve(
        VLLMEngineConfig(dtype="float16", enforce_eager=True, sleep_mode=False, exact=True,
                         max_num_batched_tokens=2048),
        cuda=True, precision="bf16",
    )  # fmt: skip
    assert (chosen.dtype, chosen.enforce_eager, chosen.sleep_mode, chosen.exact) == (
        "float16",
        True,
        False,
        True,
    )
    kwargs = llm_kwargs(gpu, "/m", 64)
    assert kwargs["enable_sleep_mode"] is True and kwargs["max_num_batched_tokens"] == 4096
    assert (kwargs["dtype"], kwargs["enforce_eager"], kwargs["max_model_len"]) == (
        "bfloat16",
        False,
        64,
    )
    cpu_kwargs = llm_kwargs(cpu, "/m", 64, ranks=2)
    assert "enable_sleep_mode" not in cpu_kwargs and "max_num_batched_tokens" not in cpu_kwargs
    assert cpu_kwargs["distributed_executor_backend"] == "external_launcher"


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
    assert precision_notice("auto", "bf16") is None  # the default: the trainer's
    fake = SimpleNamespace(close=dict, settings=SimpleNamespace(cuda=False))
    monkeypatch.setattr(seeded_vllm, "InProcessVLLM", lambda *args: fake)
    policy = LlamaForCausalLM(LlamaConfig())
    with caplog.at_level(logging.WARNING, logger=seeded_vllm.__name__):
        SeededVLLM(VLLMEngineConfig(dtype="float32"), policy, CharTokenizer(), "bf16")
        SeededVLLM(VLLMEngineConfig(dtype="bfloat16"), policy, CharTokenizer(), "bf16")
        SeededVLLM(VLLMEngineConfig(), policy, CharTokenizer(), "bf16")
        fake.settings.cuda = True  # on a GPU: said once at start, until gpu-check has run it
        SeededVLLM(VLLMEngineConfig(), policy, CharTokenizer(), "bf16")
    assert caplog.messages == [line, seeded_vllm.CUDA_NOTICE]
