"""Passes in chunks under a token budget: the torch engine's sampling chunks, scoring parts
and the chunked log-softmax give what one pass over everything gives."""

from __future__ import annotations

import pytest
import torch
from tests.helpers import compose_config

from astrai.config.validate import ConfigError
from astrai.models import scoring
from astrai.models.length_parts import consecutive_parts
from astrai.models.llama import LlamaForCausalLM
from astrai.models.pass_memory import kv_bytes_per_token, scoring_bytes_per_token
from astrai.models.scoring import response_logprobs, scoring_part_rows, token_logprobs
from astrai.models.shared_prefix import response_outputs
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import left_pad
from astrai.rollout.engines.engine import torch_engine
from astrai.rollout.engines.sampler import SamplingConfig


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_log_softmax_is_bitwise_the_whole_one(
    dtype: torch.dtype, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    logits = (3 * torch.randn(3, 7, 50)).to(dtype)
    ids = torch.randint(0, 50, (3, 7))
    results = []
    for chunk in (10**9, 4 * 50):  # one chunk; 4 positions a chunk (6 chunks, one short)
        monkeypatch.setattr(scoring, "CHUNK_LOGITS", chunk)
        with_grad = logits.clone().requires_grad_(True)
        logprobs, entropy = token_logprobs(with_grad, ids, temperature, True, True)
        assert entropy is not None
        (logprobs.sum() + 0.3 * entropy.sum()).backward()  # an entropy bonus
        metric_only = logits.clone().requires_grad_(True)
        logprobs2, entropy2 = token_logprobs(metric_only, ids, temperature, True, False)
        logprobs2.sum().backward()
        results.append((logprobs, entropy, with_grad.grad, logprobs2, entropy2, metric_only.grad))
    for whole, chunked in zip(*results, strict=True):
        assert torch.equal(whole, chunked)


def test_logits_are_computed_only_from_where_they_are_asked(
    tiny_model: LlamaForCausalLM,
) -> None:
    ids = torch.randint(0, tiny_model.config.vocab_size, (3, 9))
    full = tiny_model(ids).logits
    part = tiny_model(ids, logits_from=6).logits
    assert part.shape == (3, 3, tiny_model.config.vocab_size)
    torch.testing.assert_close(part, full[:, 6:], rtol=0, atol=1e-5)


def test_response_outputs_without_sharing_are_the_response_positions(
    tiny_model: LlamaForCausalLM,
) -> None:
    prompt = torch.randint(0, tiny_model.config.vocab_size, (2, 5))
    response = torch.randint(0, tiny_model.config.vocab_size, (2, 4))
    mask_p, mask_r = torch.ones(2, 5, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)
    full = tiny_model(torch.cat([prompt, response], 1)).logits[:, 4:8]
    got = response_outputs(tiny_model, prompt, mask_p, response, mask_r)  # grad on: no sharing
    torch.testing.assert_close(got, full, rtol=0, atol=1e-5)


def _prompts(tokenizer: CharTokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    return left_pad(tokenizer, ["12+3=", "4+5=", "100+27=", "9+9="], torch.device("cpu"))


def test_greedy_sampling_in_chunks_equals_one_pass(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    ids, mask = _prompts(tokenizer)
    engine = torch_engine(tiny_model, tokenizer)
    whole = SamplingConfig(max_new_tokens=6, temperature=0.0, max_cache_tokens=None)
    # 4 prompts × 2 rows of P + 6 tokens: a budget of 2 rows, one prompt's group a chunk
    budget = 2 * (ids.shape[1] + 6)
    chunked = SamplingConfig(max_new_tokens=6, temperature=0.0, max_cache_tokens=budget)
    assert engine.chunk_rows(8, ids.shape[1], 2, chunked) == 2
    one = engine.sample(ids, mask, 2, whole, tokenizer.stop_ids)
    four = engine.sample(ids, mask, 2, chunked, tokenizer.stop_ids)
    # the chunks' responses end at their own longest: padded to the batch's
    width = one.response_ids.shape[1]
    assert four.response_ids.shape[1] == width
    assert torch.equal(four.response_ids, one.response_ids)
    assert torch.equal(four.response_mask, one.response_mask)
    torch.testing.assert_close(four.logprobs, one.logprobs, rtol=0, atol=1e-5)


def test_sampling_in_chunks_is_one_stream_chunk_after_chunk(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    ids, mask = _prompts(tokenizer)
    engine = torch_engine(tiny_model, tokenizer)
    chunked = SamplingConfig(max_new_tokens=6, max_cache_tokens=2 * (ids.shape[1] + 6))
    first = engine.sample(
        ids, mask, 2, chunked, tokenizer.stop_ids, torch.Generator().manual_seed(3)
    )
    again = engine.sample(
        ids, mask, 2, chunked, tokenizer.stop_ids, torch.Generator().manual_seed(3)
    )
    assert torch.equal(first.response_ids, again.response_ids)  # deterministic: exact resume
    # the first chunk is what the first prompt's rows alone draw first from the stream
    alone = engine.sample(
        ids[:1], mask[:1], 2, SamplingConfig(max_new_tokens=6, max_cache_tokens=None),
        tokenizer.stop_ids, torch.Generator().manual_seed(3),
    )  # fmt: skip
    width = alone.response_ids.shape[1]
    assert torch.equal(first.response_ids[:2, :width], alone.response_ids)
    assert not first.response_mask[:2, width:].any()


def test_scoring_in_parts_under_the_token_budget(tiny_model: LlamaForCausalLM) -> None:
    vocab = tiny_model.config.vocab_size
    # tiny model: KV 2 × 2 layers × 4 KV heads × 16 × 4 bytes = 1,024, logits 4 × vocab, ...
    per_token = scoring_bytes_per_token(tiny_model.config, torch.float32, True)
    rows = scoring_part_rows(tiny_model, 3 * 10, 12, 10, 4)  # 3 rows of 10 tokens
    assert rows == 3
    assert scoring_part_rows(tiny_model, None, 12, 10, 4) == 12
    assert per_token == kv_bytes_per_token(tiny_model.config, torch.float32) + 4 * vocab + (
        8 * 4 * max(tiny_model.config.hidden_size, tiny_model.config.intermediate_size)
    )
    prompt = torch.randint(0, vocab, (12, 4))
    response = torch.randint(0, vocab, (12, 6))
    masks = torch.ones(12, 4, dtype=torch.bool), torch.ones(12, 6, dtype=torch.bool)
    with torch.no_grad():
        whole = response_logprobs(tiny_model, prompt, masks[0], response, masks[1])[0]
        parts = scoring.score_in_parts(
            lambda *rows: response_logprobs(tiny_model, *rows[:4], by_length=rows[4])[0],
            consecutive_parts(12, rows, prompt.device),
            prompt,
            masks[0],
            response,
            masks[1],
        )
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("train_type.score_tokens=0", "train_type.score_tokens"),
        ("train_type.score_tokens=lots", "train_type.score_tokens"),
        ("train_type.sampling.max_cache_tokens=-3", "train_type.sampling.max_cache_tokens"),
        ("train_type.sampling.max_cache_tokens=1.5", "train_type.sampling.max_cache_tokens"),
    ],
)
def test_a_bad_token_budget_is_one_line_naming_its_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        compose_config([override], validate=True)
