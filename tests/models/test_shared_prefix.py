"""Prompts shared by several rows run once (``astrai.models.shared_prefix``): the same outputs as
the whole-sequence forward, from fewer rows through the model."""

from __future__ import annotations

import pytest
import torch

from astrai.models import shared_prefix
from astrai.models.kv_cache import KVCache
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.shared_prefix import (
    distinct_prompts,
    padding_free_rows,
    prefill,
    response_outputs,
)
from astrai.models.tokenizer import CharTokenizer
from astrai.models.value_model import ValueModel
from astrai.rollout.collect import left_pad
from astrai.rollout.engines.sampler import SamplingConfig, generate

# last bits only: a different batch size may change a kernel's summation order on other CPUs
EXACT = {"atol": 1e-5, "rtol": 0.0}
# the value head's N(0, 1) weights sum 64 hidden units into values of magnitude ~1-10, where a
# float32 ulp is ~1e-7-1e-6: the prompt pass's other summation order is a few ulps (measured
# 1.0e-5 at a value of 0.88 on this machine's BLAS), so the bound is relative too
VALUES = {"atol": 1e-5, "rtol": 1e-5}


def _batch(tokenizer: CharTokenizer, group: int, response_length: int) -> tuple[torch.Tensor, ...]:
    """Three prompts of different lengths (left-padded), each ``group`` times, and random
    right-padded responses (row i keeps ``1 + i % response_length`` tokens)."""
    ids, mask = left_pad(tokenizer, ["3+5=", "12+7=", "rev 123="])
    ids, mask = ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)
    n = ids.shape[0]
    gen = torch.Generator().manual_seed(1)
    response_ids = torch.randint(3, tokenizer.vocab_size, (n, response_length), generator=gen)
    kept = 1 + torch.arange(n)[:, None] % response_length
    response_mask = torch.arange(response_length)[None] < kept
    response_ids = response_ids.masked_fill(~response_mask, tokenizer.pad_id)
    return ids, mask, response_ids, response_mask


def _whole_sequence(model: torch.nn.Module, ids, mask, response_ids, response_mask) -> torch.Tensor:
    p, r = ids.shape[1], response_ids.shape[1]
    out = model(
        torch.cat([ids, response_ids], 1), attention_mask=torch.cat([mask, response_mask], 1)
    )
    out = out.logits if hasattr(out, "logits") else out
    return out[:, p - 1 : p + r - 1]


def _rows_through_first_layer(model: torch.nn.Module) -> list[int]:
    """Records how many rows each forward runs through the model's first decoder layer."""
    seen: list[int] = []
    model.model.layers[0].register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[0]))
    return seen


def test_distinct_prompts_tell_padding_apart() -> None:
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9], [0, 5, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1]]).bool()
    shared = distinct_prompts(ids, mask)
    assert shared is not None
    assert shared.ids.shape == (3, 3)
    # rows 0, 1 and 3 are one prompt; row 4 has the same ids but its first token is real
    inverse = shared.inverse.tolist()
    assert inverse[0] == inverse[1] == inverse[3]
    assert len({inverse[0], inverse[2], inverse[4]}) == 3
    assert torch.equal(shared.ids[shared.inverse], ids)
    assert torch.equal(shared.mask[shared.inverse], mask)
    assert distinct_prompts(ids[1:3], mask[1:3]) is None  # all distinct: nothing to share
    assert distinct_prompts(ids[:1], mask[:1]) is None


def test_select_rows_copies_rows_and_length() -> None:
    cache = KVCache(2, 3, 1, 4, 2, torch.float32, torch.device("cpu"))
    for layer in range(2):
        cache.write(
            layer,
            torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 2),
            cache.values[layer][:, :, :2] + 10 * layer,
        )
    cache.advance(2)
    rows = cache.select_rows(torch.tensor([2, 2, 0, 1]))
    assert rows.length == 2 and rows.max_length == 4
    assert rows.keys[1][:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0, 1.0]
    assert rows.values[1][:, 0, 0, 0].tolist() == [10.0] * 4
    rows.keys[0].zero_()  # a copy: the original is untouched
    assert cache.keys[0][2, 0, 0, 0].item() == 2.0
    shorter = cache.select_rows(torch.tensor([1]), max_length=3)  # the filled 2 and 1 free
    assert shorter.length == 2 and shorter.max_length == 3
    assert shorter.keys[0].shape == (1, 1, 3, 2) and shorter.keys[0][0, 0, 1, 0].item() == 1.0
    with pytest.raises(ValueError, match="max_length 1 outside"):
        cache.select_rows(torch.tensor([1]), max_length=1)  # would drop a filled slot


@pytest.mark.parametrize("response_length", [1, 2, 5])
def test_logits_equal_the_whole_sequence_forward(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer, response_length: int
) -> None:
    batch = _batch(tokenizer, group=4, response_length=response_length)
    with torch.inference_mode():
        expected = _whole_sequence(tiny_model, *batch)
        rows = _rows_through_first_layer(tiny_model)
        got = response_outputs(tiny_model, *batch)
    assert got.shape == (12, response_length, tokenizer.vocab_size)
    torch.testing.assert_close(got, expected, **EXACT)
    # three distinct prompts, then the 12 rows' responses but their last token
    assert rows == ([3] if response_length == 1 else [3, 12])


def test_values_equal_the_whole_sequence_forward(tokenizer: CharTokenizer) -> None:
    torch.manual_seed(0)
    critic = ValueModel(LlamaConfig(num_hidden_layers=2, initializer_range=0.2)).eval()
    torch.nn.init.normal_(critic.value_head.weight)  # a zero head would hide every bug
    batch = _batch(tokenizer, group=3, response_length=4)
    with torch.inference_mode():
        expected = _whole_sequence(critic, *batch)
        rows = _rows_through_first_layer(critic)
        got = response_outputs(critic, *batch)
    assert got.shape == (9, 4)
    torch.testing.assert_close(got, expected, **VALUES)
    assert rows == [3, 9]


@pytest.mark.parametrize("kind", ["logits", "values"])
def test_responses_by_length_equal_the_whole_sequence_forward(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer, kind: str
) -> None:
    """``by_length``: after the prompt pass, the responses in passes of like length, each only
    as wide as its longest response; zeros after a pass's columns."""
    model: torch.nn.Module = tiny_model
    if kind == "values":
        torch.manual_seed(0)
        model = ValueModel(LlamaConfig(num_hidden_layers=2, initializer_range=0.2)).eval()
        torch.nn.init.normal_(model.value_head.weight)
    batch = _batch(tokenizer, group=4, response_length=5)  # rows keep 1, 2, 3, 4, 5, 1, 2, ...
    mask = batch[3]
    with torch.inference_mode():
        expected = _whole_sequence(model, *batch)
        rows = _rows_through_first_layer(model)
        got = response_outputs(model, *batch, by_length=True)
    assert got.shape == expected.shape
    kept = mask if kind == "values" else mask[..., None].expand_as(got)
    torch.testing.assert_close(got[kept], expected[kept], **(VALUES if kind == "values" else EXACT))
    # passes by length (5% padding at most): rows 4, 9 (5 tokens), 3, 8 (4), 2, 7 (3), 1, 6, 11
    # (2), then 0, 5, 10 (1 token: the prompt pass's last position alone, no forward)
    assert rows == [3, 2, 2, 2, 3]
    widths = mask.sum(dim=1)
    assert torch.all(got[torch.arange(5)[None, :].expand(12, 5) >= widths[:, None]] == 0)


def test_with_autograd_every_row_runs_whole(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    batch = _batch(tokenizer, group=4, response_length=3)
    rows = _rows_through_first_layer(tiny_model)
    got = response_outputs(tiny_model, *batch)
    assert rows == [12] and got.requires_grad  # the gradient reaches every row's prompt


def test_a_sharded_model_runs_every_row_whole(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FSDP gathers weights in every forward call: ranks must make the same calls, whatever
    # their batches share
    monkeypatch.setattr(shared_prefix, "is_fsdp", lambda model: True)
    batch = _batch(tokenizer, group=4, response_length=3)
    rows = _rows_through_first_layer(tiny_model)
    with torch.inference_mode():
        response_outputs(tiny_model, *batch)
    assert rows == [12]


def test_prefill_fills_the_cache_as_a_whole_batch_does(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    ids, mask, _, _ = _batch(tokenizer, group=3, response_length=1)
    with torch.inference_mode():
        whole = tiny_model.new_cache(9, ids.shape[1] + 4)
        logits = tiny_model(ids, attention_mask=mask, cache=whole).logits[:, -1]
        cache, last = prefill(tiny_model, ids, mask, ids.shape[1] + 4)
    assert cache.length == whole.length == ids.shape[1] and cache.max_length == whole.max_length
    torch.testing.assert_close(last, logits, **EXACT)
    for layer in range(2):
        torch.testing.assert_close(cache.keys[layer], whole.keys[layer], **EXACT)
        torch.testing.assert_close(cache.values[layer], whole.values[layer], **EXACT)


def test_grouped_sampling_draws_what_recomputation_draws(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    ids, mask, _, _ = _batch(tokenizer, group=4, response_length=1)
    cfg = SamplingConfig(max_new_tokens=8, temperature=1.0)
    rows = _rows_through_first_layer(tiny_model)
    outs = [
        generate(
            tiny_model, ids, mask, cfg, tokenizer.eos_id, tokenizer.pad_id,
            generator=torch.Generator().manual_seed(5), use_cache=use_cache,
        )
        for use_cache in (True, False)
    ]  # fmt: skip
    assert rows[0] == 3  # the cached run's prompt pass: one row per distinct prompt
    assert torch.equal(outs[0].response_ids, outs[1].response_ids)
    torch.testing.assert_close(outs[0].logprobs, outs[1].logprobs, **EXACT)
    # the group's rows drew different responses from one shared prompt pass
    assert len({tuple(r) for r in outs[0].response_ids[:4].tolist()}) > 1


@pytest.mark.parametrize("part", [1, 5])
def test_micro_batches_score_as_the_whole_batch_to_the_last_bits(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer, part: int
) -> None:
    # long responses (attention over many keys); parts of one row repeat no prompt and take the
    # whole-sequence forward, parts of five share some
    batch = _batch(tokenizer, group=4, response_length=14)
    with torch.inference_mode():
        whole = response_outputs(tiny_model, *batch)
        parts = [
            response_outputs(tiny_model, *rows)
            for rows in zip(*(t.split(part) for t in batch), strict=True)
        ]
    # at the response tokens (a part of one row with a left-padded prompt runs it without the
    # gap, shared_prefix.padding_free_rows: its outputs after the response ends are padding's,
    # which every caller masks)
    response = batch[3].bool()
    torch.testing.assert_close(torch.cat(parts)[response], whole[response], **EXACT)


def test_padding_free_rows_start_each_sequence_at_column_zero() -> None:
    # prompts [_, 5, 6] and [7, 8, 9] (left-padded), responses [1, 2, _] and [3, _, _]
    prompt_ids = torch.tensor([[0, 5, 6], [7, 8, 9]])
    prompt_mask = torch.tensor([[False, True, True], [True, True, True]])
    response_ids = torch.tensor([[1, 2, 0], [3, 0, 0]])
    response_mask = torch.tensor([[True, True, False], [True, False, False]])
    mask = torch.cat([prompt_mask, response_mask], dim=1)
    ids, aligned, at = padding_free_rows(prompt_ids, prompt_mask, response_ids, mask)
    # lengths 2 + 2 = 4 and 3 + 1 = 4: four columns, no padding at all (the layout had 6)
    assert ids.tolist() == [[5, 6, 1, 2], [7, 8, 9, 3]]
    assert aligned.all()
    # the output at column p_i - 1 + j predicts response token j (clamped after the response)
    assert at.tolist() == [[1, 2, 3], [2, 3, 3]]


def test_padding_free_rows_score_what_the_padded_layout_scores(
    tiny_model: LlamaForCausalLM,
) -> None:
    torch.manual_seed(3)
    vocab = tiny_model.config.vocab_size
    prompt_mask = torch.tensor([[False, False, True, True], [True, True, True, True]])
    response_mask = torch.tensor(
        [[True, True, True, False, False], [True, False, False, False, False]]
    )
    prompt_ids = torch.randint(0, vocab, (2, 4))
    response_ids = torch.randint(0, vocab, (2, 5))
    mask = torch.cat([prompt_mask, response_mask], dim=1)
    with torch.no_grad():
        padded = tiny_model(torch.cat([prompt_ids, response_ids], 1), attention_mask=mask).logits
        ids, aligned, at = padding_free_rows(prompt_ids, prompt_mask, response_ids, mask)
        free = tiny_model(ids, attention_mask=aligned, logits_at=at).logits
    expected = padded[:, 3:8]  # the outputs at P - 1 .. P + R - 2
    torch.testing.assert_close(free[response_mask], expected[response_mask], **EXACT)
    assert ids.shape == (2, 5)  # the longest row, 2 + 3 (the layout: 4 + 5)
