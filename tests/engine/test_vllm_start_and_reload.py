"""vLLM's CPU build (``make test-vllm``), issue 59: the engine starts without the chat-template
warm-up traceback vLLM logs when it has no tokenizer, and reloads weights through the worker
(``LLM.collective_rpc("reload_weights")``), inside vLLM's config context, after which greedy
continuations are the new weights' (astrai's sampler on the same weights)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.models.weights import named_weights
from astrai.rollout.collect import left_pad
from astrai.rollout.engines.in_process_vllm import InProcessVLLM
from astrai.rollout.engines.sampler import SamplingConfig, generate
from astrai.rollout.engines.vllm_settings import VLLMEngineConfig

pytestmark = pytest.mark.vllm

GREEDY = SamplingConfig(max_new_tokens=12, temperature=0.0)
PROMPTS = [f"{a}+{b}=" for a, b in ((1, 2), (30, 47), (512, 9), (88, 880))]
PROBE = "astrai's test: a record of vLLM's renderer logger, after the engine started"


@dataclass
class Started:
    engine: InProcessVLLM
    policy: LlamaForCausalLM
    records: list[logging.LogRecord]  # what vLLM's renderer logger printed as the engine started


@pytest.fixture(scope="module")
def started() -> Iterator[Started]:
    pytest.importorskip("vllm", reason="vLLM is not installed: make test-vllm")
    torch.manual_seed(0)
    # 2 heads of 32 (the CPU kernel's sizes); a large init, so a wrong weight shows in greedy ids
    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         initializer_range=0.2)  # fmt: skip
    policy = LlamaForCausalLM(config).eval()
    # what vLLM's renderer logger hands its handlers (it passed the logger's filters): what it
    # prints. Recorded at the logger itself, since vllm.LLM's logging config (dictConfig) resets
    # a vllm.* logger's handlers and level as it starts, not its methods or filters
    renderer_logs = logging.getLogger("vllm.renderers.base")
    handled: list[logging.LogRecord] = []
    call_handlers = renderer_logs.callHandlers

    def recording(record: logging.LogRecord) -> None:
        handled.append(record)
        call_handlers(record)

    renderer_logs.callHandlers = recording  # type: ignore[method-assign]
    try:
        engine = InProcessVLLM(policy, CharTokenizer(), VLLMEngineConfig(kv_cache_space_gib=1))
        renderer_logs.warning(PROBE)  # after vLLM's logging config: the recording still works
    finally:
        del renderer_logs.callHandlers
    with engine:
        yield Started(engine, policy, handled)


def test_the_engine_starts_without_the_chat_template_warmup_traceback(started: Started) -> None:
    messages = [r.getMessage() for r in started.records]
    assert messages[-1] == PROBE  # the recording saw what the logger printed to the end
    assert "Chat template warmup failed" not in messages
    assert not [r for r in started.records if r.exc_info]  # no traceback at all


def test_weights_reload_through_the_worker_in_vllm_s_config_context(
    started: Started, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.config import get_current_vllm_config

    engine, tokenizer = started.engine, CharTokenizer()
    runner = engine._model_runner()
    reload = runner.reload_weights
    contexts: list[Any] = []

    def recording_reload(*args: Any, **kwargs: Any) -> None:
        contexts.append(get_current_vllm_config())  # raises outside a config context
        reload(*args, **kwargs)

    monkeypatch.setattr(runner, "reload_weights", recording_reload)
    policy = copy.deepcopy(started.policy)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.02)
    tokens = torch.randint(
        3, policy.config.vocab_size, (4, 12), generator=torch.Generator().manual_seed(0)
    )
    loss = F.cross_entropy(policy(tokens).logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    ids, mask = left_pad(tokenizer, PROMPTS)
    stop_ids, pad_id = tokenizer.stop_ids, tokenizer.pad_id
    expected = generate(policy, ids, mask, GREEDY, stop_ids, pad_id)
    before = engine.sample(ids, mask, 1, GREEDY, stop_ids, pad_id)
    assert not torch.equal(before.response_ids, expected.response_ids)  # the step shows
    try:
        engine.sync_weights(named_weights(policy))
        assert contexts == [runner.vllm_config]  # one reload, in the engine's own config
        after = engine.sample(ids, mask, 1, GREEDY, stop_ids, pad_id)
        torch.testing.assert_close(after.response_ids, expected.response_ids, rtol=0, atol=0)
        torch.testing.assert_close(after.response_mask, expected.response_mask)
    finally:
        engine.sync_weights(named_weights(started.policy))
