"""``engine=vllm``'s calls to vLLM, step by step, against a recording stand-in
(``tests/recording_vllm.py``): on CUDA as TRL's colocate mode runs it (sleep level 2 through the
update; weights woken, loaded, the prefix cache reset, the KV cache woken; CUDA graphs,
bf16 from ``infra.precision``, no per-request seeds), on the CPU as before (issue 49)."""

from __future__ import annotations

import pytest
import torch
from tests import recording_vllm

from astrai.models.merged_weights import engine_weights
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import left_pad

SAMPLING = recording_vllm.SAMPLING
_engine, _step, _policy = (
    recording_vllm.engine_on,
    recording_vllm.one_step,
    recording_vllm.small_policy,
)


def test_on_cuda_the_engine_sleeps_through_the_update_and_wakes_in_trl_s_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = _engine(monkeypatch, cuda=True)
    policy = _policy()
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
        "empty_cache",  # the trainer's cached free blocks back to the device (TRL)
        "LLM.wake_up",  # weights
        "LLM.collective_rpc",  # the worker's reload_weights: vLLM's config context
        "reload_weights",
        "LLM.reset_prefix_cache",  # its KV entries were the old weights'
        "empty_cache",
        "LLM.wake_up",  # KV cache
    ]
    assert recording_vllm.names() == step * 2
    kwargs = {name: kw for name, _, kw in recording_vllm.CALLS}
    assert kwargs["LLM.sleep"] == {"level": 2}
    wakes = [kw["tags"] for name, _, kw in recording_vllm.CALLS if name == "LLM.wake_up"]
    assert wakes == [["weights"], ["kv_cache"]] * 2
    rpcs = [args for name, args, _ in recording_vllm.CALLS if name == "LLM.collective_rpc"]
    assert rpcs == [("reload_weights",)] * 2
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
    engine.close()


def test_on_the_cpu_no_sleep_and_a_seed_on_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine(monkeypatch, cuda=False)
    (_, _, init), *_ = recording_vllm.CALLS
    assert "enable_sleep_mode" not in init and init["enforce_eager"] is True
    assert "max_num_batched_tokens" not in init and init["dtype"] == "bfloat16"
    recording_vllm.CALLS.clear()
    _step(engine, _policy())
    # the tied lm_head's packed copy rebuilt after the reload (the CPU build's)
    assert recording_vllm.names() == [
        "LLM.generate", "LLM.collective_rpc", "reload_weights", "repack_tied_lm_head",
        "LLM.reset_prefix_cache",
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
    engine.close()  # its share of the device (pass_memory) goes with it
