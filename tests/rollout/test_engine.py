"""The ``engine`` seam: ``engine=torch`` is astrai's sampler exactly, and the trainer samples
through whatever engine its config names."""

from __future__ import annotations

import pytest
import torch
from tests.helpers import compose_config

from astrai.config.validate import ConfigError
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import left_pad
from astrai.rollout.engine import TorchEngine, build_engine
from astrai.rollout.sampler import SamplingConfig, generate


def test_the_torch_engine_is_the_sampler_with_each_prompt_repeated_group_size_times() -> None:
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig(initializer_range=0.2)).eval()
    tokenizer = CharTokenizer()
    ids, mask = left_pad(tokenizer, ["1+2=", "13+4=", "7+7="])
    sampling = SamplingConfig(max_new_tokens=6, temperature=1.0)
    ours = TorchEngine().sample(
        policy, ids, mask, 4, sampling, tokenizer.stop_ids, tokenizer.pad_id,
        generator=torch.Generator().manual_seed(3),
    )  # fmt: skip
    reference = generate(
        policy, ids.repeat_interleave(4, 0), mask.repeat_interleave(4, 0), sampling,
        tokenizer.stop_ids, tokenizer.pad_id, generator=torch.Generator().manual_seed(3),
    )  # fmt: skip
    assert ours.response_ids.shape[0] == 12  # prompt-major: rows 0-3 answer prompt 0
    for name in ("response_ids", "response_mask", "logprobs"):
        assert torch.equal(getattr(ours, name), getattr(reference, name)), name
    assert TorchEngine().sync_weights(policy) is None  # it samples the live policy


def test_the_config_names_the_engine() -> None:
    cfg = compose_config(["debug=quick"])
    assert cfg.engine.name == "torch" and isinstance(build_engine(cfg.engine), TorchEngine)
    with pytest.raises(ConfigError, match="engine.name='sglang' is not an engine"):
        compose_config(["debug=quick", "engine.name=sglang"])


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
    with pytest.raises(ConfigError, match="engine=vllm runs on the CPU only for now"):
        compose_config(["debug=quick", "engine=vllm", "infra.device=cuda"])
    with pytest.raises(ConfigError, match="engine=vllm runs on the CPU only for now"):
        compose_config(["debug=quick", "engine=vllm"])  # infra.device=auto picks the GPU
