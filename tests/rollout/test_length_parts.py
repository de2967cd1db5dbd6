"""``models.length_parts``: passes split by length under a token budget and trimmed, by hand."""

from __future__ import annotations

import torch

from astrai.models.length_parts import (
    cached_share,
    consecutive_parts,
    group_parts,
    length_parts,
    padding_share,
    trim_columns,
    trim_rows,
)
from astrai.models.llama import LlamaForCausalLM
from astrai.models.scoring import response_logprobs
from astrai.models.sorted_parts import sorted_parts
from astrai.rollout.minibatch import Minibatch


def _masks(prompt_lens: list[int], response_lens: list[int], p: int, r: int):
    """Left-padded prompt masks ``[N, p]`` and right-padded response masks ``[N, r]``."""
    prompt = torch.tensor([[j >= p - n for j in range(p)] for n in prompt_lens])
    response = torch.tensor([[j < n for j in range(r)] for n in response_lens])
    return prompt, response


def test_trim_columns_keeps_the_columns_some_row_uses() -> None:
    prompt, response = _masks([2, 3], [1, 4], p=6, r=9)
    assert trim_columns(prompt, response) == (3, 4)  # prompts from column 6 - 3, responses to 4
    prompt, response = _masks([6], [9], p=6, r=9)
    assert trim_columns(prompt, response) == (0, 9)  # nothing to trim
    prompt, response = _masks([1], [0], p=3, r=5)
    assert trim_columns(prompt, response) == (2, 1)  # an empty response keeps one column


def test_length_parts_sort_longest_first_and_fit_the_budget() -> None:
    # totals (prompt + response): 3+2=5, 2+7=9, 3+1=4, 1+8=9, 2+2=4; P=3, R=8
    prompt, response = _masks([3, 2, 3, 1, 2], [2, 7, 1, 8, 2], p=3, r=8)
    # 5 rows × 11 columns = 55 tokens: within 55 one part, in order (the rectangle as it is)
    assert [part.tolist() for part in length_parts(prompt, response, 55)] == [[0, 1, 2, 3, 4]]
    assert [part.tolist() for part in length_parts(prompt, response, None)] == [[0, 1, 2, 3, 4]]
    # budget 20, order by total, longest first, ties in row order: 1, 3, 0, 2, 4; a part costs
    # its rows × its first (longest) row: [1, 3] 2 × 9 = 18, + row 0: 3 × 9 = 27 > 20;
    # [0] 5, + row 2: 2 × 5 = 10 within 20, but 1 of its 10 positions is padding (> 5%);
    # [2, 4]: 2 × 4 = 8, none
    parts = length_parts(prompt, response, 20)
    assert [part.tolist() for part in parts] == [[1, 3], [0], [2, 4]]
    # budget 8: rows 1 and 3 (9 tokens each) are parts of their own; [0] 5, + row 2: 2 × 5 = 10
    # > 8; [2, 4]: 2 × 4 = 8
    parts = length_parts(prompt, response, 8)
    assert [part.tolist() for part in parts] == [[1], [3], [0], [2, 4]]


def test_padding_share_counts_what_each_layout_computes() -> None:
    prompt, response = _masks([3, 2, 3, 1, 2], [2, 7, 1, 8, 2], p=3, r=8)
    used = 11 + 20  # prompt tokens + response tokens
    whole = [torch.arange(5)]
    # the whole-sequence forward without the prompts' gap: rows × the longest row (9)
    assert padding_share(prompt, response, whole) == 1 - used / 45
    parts = [torch.tensor([1, 3]), torch.tensor([0, 2, 4])]  # 2 × 9, 3 × 5
    assert padding_share(prompt, response, parts) == 1 - used / 33
    assert [p.tolist() for p in consecutive_parts(5, 2, torch.device("cpu"))] == [
        [0, 1],
        [2, 3],
        [4],
    ]
    assert [p.tolist() for p in consecutive_parts(5, None, torch.device("cpu"))] == [
        [0, 1, 2, 3, 4]
    ]


def test_a_trimmed_minibatch_keeps_every_token_tensor_aligned() -> None:
    prompt, response = _masks([2, 1], [3, 1], p=4, r=6)
    ids = torch.arange(12).view(2, 6)
    batch = Minibatch(
        prompt_ids=torch.arange(8).view(2, 4),
        prompt_mask=prompt,
        response_ids=ids,
        response_mask=response,
        old_logprobs=None,
        ref_logprobs=ids.float(),
        advantages=-ids.float(),
    )
    trimmed = batch.trimmed()
    assert trimmed.prompt_ids.tolist() == [[2, 3], [6, 7]]
    assert trimmed.response_ids.tolist() == [[0, 1, 2], [6, 7, 8]]
    assert trimmed.ref_logprobs is not None and trimmed.ref_logprobs.tolist() == [
        [0.0, 1.0, 2.0],
        [6.0, 7.0, 8.0],
    ]
    assert trimmed.advantages.shape == trimmed.loss_mask.shape == (2, 3)
    assert trimmed.old_logprobs is None and trimmed.values is None
    full = _masks([4], [6], p=4, r=6)
    whole = Minibatch(torch.zeros(1, 4), full[0], torch.zeros(1, 6), full[1], None, None, ids[:1])
    assert whole.trimmed() is whole  # nothing to trim: the same object


def test_trimmed_rows_score_what_the_padded_rows_score(tiny_model: LlamaForCausalLM) -> None:
    """Padding columns change no logprob of a real token (to float rounding: a different
    rectangle may take other kernels); the trimmed pass pads its scores back with zeros."""
    torch.manual_seed(1)
    prompt, response = _masks([3, 5], [2, 4], p=7, r=9)
    prompt_ids = torch.randint(0, tiny_model.config.vocab_size, (2, 7))
    response_ids = torch.randint(0, tiny_model.config.vocab_size, (2, 9))
    with torch.no_grad():
        padded, _ = response_logprobs(tiny_model, prompt_ids, prompt, response_ids, response)
        trimmed, _ = response_logprobs(
            tiny_model, *trim_rows(prompt_ids, prompt, response_ids, response)
        )
    assert trimmed.shape == (2, 4)
    torch.testing.assert_close(trimmed, padded[:, :4], atol=1e-5, rtol=0)
    assert torch.all(padded[:, 4:] == 0) and padded[0, 2:].eq(0).all()


def test_sorted_parts_cut_at_the_budget_and_at_the_padding_cap() -> None:
    lengths = [10, 9, 5, 5, 1]
    # no bound: [0, 1] 2 × 10 = 20 holds 19 (5% padding: kept); + row 2: 3 × 10 = 30 holds 24
    # (20%); [2, 3] 10 of 10; + row 4: 3 × 5 = 15 holds 11 (27%)
    assert sorted_parts(lengths, None) == [[0, 1], [2, 3], [4]]
    assert sorted_parts(lengths, None, max_padding=1.0) == [[0, 1, 2, 3, 4]]
    # budget 25 and any padding: [0, 1] 20, + row 2 30 > 25; [2, 3, 4] 15
    assert sorted_parts(lengths, 25, max_padding=1.0) == [[0, 1], [2, 3, 4]]
    assert sorted_parts([3, 7, 7], 5) == [[1], [2], [0]]  # ties in order; past the budget alone
    assert sorted_parts([], None) == []


def test_group_parts_keep_groups_whole_sorted_by_prompt_length() -> None:
    # 4 groups of 2 rows; prompt lengths 2, 6, 5, 6 (P = 6); longest responses 3, 1, 4, 2 (R = 4)
    prompt, response = _masks([2, 2, 6, 6, 5, 5, 6, 6], [3, 1, 1, 1, 4, 2, 2, 1], p=6, r=4)
    assert [p.tolist() for p in group_parts(prompt, response, 2, 80)] == [list(range(8))]
    # budget 40: groups by prompt length 1, 3 (6 each), 2 (5), 0 (2); [1, 3]: 4 rows × (6 + 2)
    # = 32; + group 2: 6 × (6 + 4) = 60 > 40; [2] alone; + group 0: prompts 5 + 2 of 2 × 5 = 10
    # (30% padding): [0]
    parts = group_parts(prompt, response, 2, 40)
    assert [p.tolist() for p in parts] == [[2, 3, 6, 7], [4, 5], [0, 1]]
    # one group's 2 × 10 tokens past the budget: consecutive parts of as many rows as fit
    singles = [p.tolist() for p in group_parts(prompt, response, 2, 19)]
    assert singles == [[row] for row in range(8)]
    # cached share: part [2, 3, 6, 7]: prompts 2 × 6, responses by length (1, 1, 2, 1 → [2] 2,
    # [0, 1, 3] 3 × 1); [4, 5]: 5, responses 4 + 2 by length [4] and [2] (50% > 5%: apart);
    # [0, 1]: 2, responses [3], [1]
    used = (12 + 5) + (5 + 6) + (2 + 4)
    assert cached_share(prompt, response, parts, 2, by_length=True) == 1 - used / used
    # all at once: [2, 3, 6, 7] 4 × 2, [4, 5] 2 × 4, [0, 1] 2 × 3
    positions = 12 + 8 + 5 + 8 + 2 + 6
    assert cached_share(prompt, response, parts, 2, by_length=False) == 1 - used / positions
