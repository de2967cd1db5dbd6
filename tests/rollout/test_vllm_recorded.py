"""``engine=vllm``'s calls to vLLM, step by step, against a recording stand-in
(``tests/recording_vllm.py``): on CUDA as TRL's colocate mode runs it (sleep level 2 through the
update; weights woken, loaded, the prefix cache reset, the KV cache woken; CUDA graphs,
bf16 from ``infra.precision``, no per-request seeds), on the CPU as before (issue 49)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tests import recording_vllm

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.merged_weights import engine_weights
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout import vllm_engine
from astrai.rollout.collect import left_pad
from astrai.rollout.sampler import SamplingConfig
from astrai.rollout.seeded_vllm import SeededVLLM
from astrai.rollout.vllm_settings import VLLMEngineConfig, resolve

SAMPLING = SamplingConfig(max_new_tokens=3, temperature=1.0)


def _engine(monkeypatch: pytest.MonkeyPatch, cuda: bool, **knobs: Any) -> SeededVLLM:
    recording_vllm.install(monkeypatch)
    if cuda:  # the device decides (the policy's): here the CPU's policy stands for a GPU's
        monkeypatch.setattr(
            vllm_engine,
            "resolve",
            lambda config, _cuda, precision: resolve(config, True, precision),
        )
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, num_attention_heads=2,
                                          num_key_value_heads=1))  # fmt: skip
    return SeededVLLM(VLLMEngineConfig(**knobs), policy, CharTokenizer(), "bf16")


def _step(engine: SeededVLLM, policy_like: LlamaForCausalLM) -> None:
    """One RL step's engine calls, in the trainer's order (``Trainer.run_step``)."""
    tokenizer = CharTokenizer()
    ids, mask = left_pad(tokenizer, ["1+2=", "3+4="])
    engine.sample(ids, mask, 2, SAMPLING, tokenizer.stop_ids, torch.Generator().manual_seed(1))
    engine.before_update()
    engine.after_update()
    engine.sync_weights(engine_weights(policy_like))


def test_on_cuda_the_engine_sleeps_through_the_update_and_wakes_in_trl_s_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = _engine(monkeypatch, cuda=True)
    policy = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, num_attention_heads=2,
                                          num_key_value_heads=1))  # fmt: skip
    start = recording_vllm.names()
    assert start == ["LLM", "LLM.generate", "LLM.reset_prefix_cache"]  # start, warm-up
    (_, _, init), *_ = recording_vllm.CALLS
    assert init["enable_sleep_mode"] is True and init["dtype"] == "bfloat16"
    assert init["enforce_eager"] is False and init["max_num_batched_tokens"] == 4096
    assert init["gpu_memory_utilization"] == 0.3
    assert init["logprobs_mode"] == "processed_logprobs"
    recording_vllm.CALLS.clear()
    for _ in range(2):
        _step(engine, policy)
    step = [
        "LLM.generate",  # the rollout
        "LLM.sleep",  # before the update: weights and KV cache released
        "LLM.wake_up",  # weights
        "reload_weights",
        "LLM.reset_prefix_cache",  # its KV entries were the old weights'
        "LLM.wake_up",  # KV cache
    ]
    assert recording_vllm.names() == step * 2
    kwargs = {name: kw for name, _, kw in recording_vllm.CALLS}
    assert kwargs["LLM.sleep"] == {"level": 2}
    wakes = [kw["tags"] for name, _, kw in recording_vllm.CALLS if name == "LLM.wake_up"]
    assert wakes == [["weights"], ["kv_cache"]] * 2
    assert kwargs["reload_weights"]["is_checkpoint_format"] is True
    assert kwargs["reload_weights"]["weights_iterator"] == [n for n, _ in engine_weights(policy)]
    seeds = [kw["seed"] for name, _, kw in recording_vllm.CALLS if name == "SamplingParams"]
    assert seeds == [None] * 4  # no per-request seed on CUDA unless engine.exact=true
    engine.close()
    assert recording_vllm.names()[-1] == "shutdown"


def test_a_sample_on_released_weights_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine(monkeypatch, cuda=True)
    engine.before_update()
    tokenizer = CharTokenizer()
    ids, mask = left_pad(tokenizer, ["1+2="])
    with pytest.raises(RuntimeError, match="sync_weights must come first"):
        engine.sample(ids, mask, 2, SAMPLING, tokenizer.stop_ids)


def test_on_the_cpu_no_sleep_and_a_seed_on_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine(monkeypatch, cuda=False)
    (_, _, init), *_ = recording_vllm.CALLS
    assert "enable_sleep_mode" not in init and init["enforce_eager"] is True
    assert "max_num_batched_tokens" not in init and init["dtype"] == "bfloat16"
    recording_vllm.CALLS.clear()
    _step(engine, LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, num_attention_heads=2,
                                                num_key_value_heads=1)))  # fmt: skip
    # the tied lm_head's packed copy rebuilt after the reload (the CPU build's)
    assert recording_vllm.names() == [
        "LLM.generate", "reload_weights", "repack_tied_lm_head", "LLM.reset_prefix_cache"
    ]  # fmt: skip
    seeds = [kw["seed"] for name, _, kw in recording_vllm.CALLS if name == "SamplingParams"]
    assert len(seeds) == 2 and all(isinstance(seed, int) for seed in seeds)


def test_exact_on_cuda_seeds_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine(monkeypatch, cuda=True, exact=True)
    recording_vllm.CALLS.clear()
    tokenizer = CharTokenizer()
    ids, mask = left_pad(tokenizer, ["1+2="])
    engine.sample(ids, mask, 2, SAMPLING, tokenizer.stop_ids, torch.Generator().manual_seed(1))
    seeds = [kw["seed"] for name, _, kw in recording_vllm.CALLS if name == "SamplingParams"]
    assert len(seeds) == 1 and isinstance(seeds[0], int)
