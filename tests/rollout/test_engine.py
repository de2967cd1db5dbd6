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
