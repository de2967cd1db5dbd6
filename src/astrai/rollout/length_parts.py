"""Passes without padding's cost: rows split by length under a token budget, each part trimmed.

A rollout's rows are padded to its longest prompt (left) and longest response (right). With
math-RL lengths (a median of a few hundred tokens, a few at the 1k cap) most of that rectangle
is padding, and a forward or backward over it is spent on nothing. Two remedies, as verl's
dynamic batch size (``use_dynamic_bsz``) does without packing:

- ``length_parts``: where a pass must be split (its rectangle exceeds the token budget), rows
  are sorted longest first and cut into parts whose own rectangles fit the budget, so rows of
  like length share a part;
- ``trim_columns``: each part keeps only the columns some row of it uses.

Which rows share a part changes no value: every loss is a token sum over the whole minibatch's
divisors (``training.accumulation``). A pass that fits the budget whole keeps its rows in order
(one part), which is also what the recorded default-job digests ran.
"""

from __future__ import annotations

import torch
from torch import Tensor


def trim_columns(prompt_mask: Tensor, response_mask: Tensor) -> tuple[int, int]:
    """The columns a set of rows uses: ``(first, end)``, prompts from column ``first`` (they are
    left-padded) and responses up to column ``end`` (right-padded, at least one column).

    Args:
        prompt_mask: ``[N, P]`` bool, True = a prompt token.
        response_mask: ``[N, R]`` bool, True = a response token.
    """
    prompt_cols = prompt_mask.bool().any(dim=0).nonzero()
    response_cols = response_mask.bool().any(dim=0).nonzero()
    first = int(prompt_cols[0]) if len(prompt_cols) else prompt_mask.shape[1]
    end = int(response_cols[-1]) + 1 if len(response_cols) else 1
    return first, end


def trim_rows(
    prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The rows without the columns none of them uses (``trim_columns``)."""
    first, end = trim_columns(prompt_mask, response_mask)
    prompts = prompt_ids[:, first:], prompt_mask[:, first:]
    return (*prompts, response_ids[:, :end], response_mask[:, :end])


def pad_responses(scores: Tensor, length: int) -> Tensor:
    """``scores [n, r]`` of trimmed rows back to ``[n, length]`` response columns, 0 after."""
    return torch.nn.functional.pad(scores, (0, length - scores.shape[1]))


def length_parts(prompt_mask: Tensor, response_mask: Tensor, budget: int | None) -> list[Tensor]:
    """Row indices of each part of a pass within ``budget`` tokens, rows sorted by length
    (prompt + response), longest first; one part in the rows' own order where the padded
    rectangle fits (``budget`` None: no bound). A part costs its rows × its longest row: the
    whole-sequence forward runs each row from column 0 without the prompt's left padding
    (``models.shared_prefix.padding_free_rows``). A row longer than the budget is a part of
    its own.

    Args:
        prompt_mask: ``[N, P]`` left-padded; response_mask: ``[N, R]`` right-padded.

    Returns:
        Index tensors ``[n_i]`` on the masks' device, covering every row once.
    """
    n = prompt_mask.shape[0]
    device = prompt_mask.device
    if budget is None or n * (prompt_mask.shape[1] + response_mask.shape[1]) <= budget:
        return [torch.arange(n, device=device)]
    totals = (prompt_mask.bool().sum(dim=1) + response_mask.bool().sum(dim=1)).tolist()
    order = sorted(range(n), key=lambda row: -totals[row])  # stable: ties keep the rows' order
    parts: list[list[int]] = []
    for row in order:  # longest first: a part's first row is its longest
        if parts and (len(parts[-1]) + 1) * totals[parts[-1][0]] <= budget:
            parts[-1].append(row)
        else:
            parts.append([row])
    return [torch.tensor(part, device=device) for part in parts]


def consecutive_parts(rows: int, size: int | None, device: torch.device) -> list[Tensor]:
    """Row indices of consecutive parts of ``size`` rows (``train_type.micro_batch_size``; the
    last may be shorter); one part where ``size`` is None or covers every row."""
    index = torch.arange(rows, device=device)
    if size is None or size >= rows:
        return [index]
    return list(index.split(size))


def padding_share(prompt_mask: Tensor, response_mask: Tensor, parts: list[Tensor]) -> float:
    """The share of the token positions the parts' whole-sequence forwards hold that are
    padding: each part's rows × its longest prompt + response (``bench/padding.py``)."""
    lengths = prompt_mask.bool().sum(dim=1) + response_mask.bool().sum(dim=1)
    positions = sum(len(part) * int(lengths[part].max()) for part in parts)
    return 1.0 - int(lengths.sum()) / max(positions, 1)


def trimmed_share(prompt_mask: Tensor, response_mask: Tensor, parts: list[Tensor]) -> float:
    """The same share for parts that keep the prompt | response layout, each trimmed to its
    longest prompt and longest response (a cached pass: ``rollout.scoring.score_in_parts``)."""
    positions = used = 0
    for part in parts:
        pm, rm = prompt_mask[part], response_mask[part]
        first, end = trim_columns(pm, rm)
        positions += len(part) * (pm.shape[1] - first + end)
        used += int(pm.bool().sum()) + int(rm.bool().sum())
    return 1.0 - used / max(positions, 1)
