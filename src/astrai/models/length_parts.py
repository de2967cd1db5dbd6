"""Passes without padding's cost: rows split by length under a token budget, each part trimmed.

A rollout's rows are padded to its longest prompt (left) and longest response (right). With
math-RL lengths (a median of a few hundred tokens, a few at the 1k cap) most of that rectangle
is padding, and a forward or backward over it is spent on nothing. Two remedies, as verl's
dynamic batch size (``use_dynamic_bsz``) does, without packing:

- ``length_parts``: where a pass must be split (its rectangle exceeds the token budget), rows
  are sorted longest first and cut into parts whose own rectangles fit the budget and are at
  most ``models.sorted_parts.MAX_PADDING`` padding, so rows of like length share a part;
- ``group_parts``: the same for a cached pass (a group's prompt runs once), whose parts keep a
  group's rows together: groups sorted by prompt length; within a part the responses then run
  by length (``models.shared_prefix.response_outputs``' ``by_length``);
- ``trim_columns``: each part keeps only the columns some row of it uses.

Which rows share a part changes no value: every loss is a token sum over the whole minibatch's
divisors (``training.accumulation``). A pass that fits the budget whole keeps its rows in order
(one part), which is also what the recorded default-job digests ran.
"""

from __future__ import annotations

import torch
from torch import Tensor

from astrai.models.pass_memory import rows_per_pass
from astrai.models.sorted_parts import MAX_PADDING, sorted_parts


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
    (prompt + response), longest first, each part at most ``MAX_PADDING`` padding
    (``models.sorted_parts``); one part in the rows' own order where the padded rectangle fits
    (``budget`` None: no bound). A part costs its rows × its longest row: the whole-sequence
    forward runs each row from column 0 without the prompt's left padding
    (``models.shared_prefix.padding_free_rows``).

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
    return [torch.tensor(part, device=device) for part in sorted_parts(totals, budget)]


def group_parts(
    prompt_mask: Tensor, response_mask: Tensor, group: int, budget: int | None
) -> list[Tensor]:
    """Row indices of the parts of a cached pass within ``budget`` tokens, a group's ``group``
    consecutive rows (one prompt) always together: one part in order where the padded
    rectangle fits (``budget`` None: no bound), else groups sorted by prompt length, longest
    first, a group joining the current part while its rows × (longest prompt + longest
    response) fit the budget and at most ``MAX_PADDING`` of its prompt pass is padding. Where
    one group's rows do not fit the budget, or the rows are not whole groups: consecutive
    parts of as many rows as fit (``models.pass_memory.rows_per_pass``)."""
    n = prompt_mask.shape[0]
    device = prompt_mask.device
    width = prompt_mask.shape[1] + response_mask.shape[1]
    if budget is None or n * width <= budget:
        return [torch.arange(n, device=device)]
    if group < 1 or n % group or group * width > budget:
        return consecutive_parts(n, rows_per_pass(budget, width, n, group), device)
    prompts = prompt_mask.bool().sum(dim=1)[::group].tolist()
    responses = response_mask.bool().sum(dim=1).view(-1, group).amax(dim=1).tolist()
    order = sorted(range(len(prompts)), key=lambda g: -prompts[g])
    parts: list[list[int]] = []
    used = longest_response = 0  # the current part's prompt tokens, its longest response
    for g in order:
        if parts:
            groups = len(parts[-1]) + 1
            longest_prompt = prompts[parts[-1][0]]
            width = longest_prompt + max(longest_response, responses[g])
            little_padding = used + prompts[g] >= (1.0 - MAX_PADDING) * groups * longest_prompt
            if groups * group * width <= budget and little_padding:
                parts[-1].append(g)
                used += prompts[g]
                longest_response = max(longest_response, responses[g])
                continue
        parts.append([g])
        used, longest_response = prompts[g], responses[g]
    rows = torch.arange(n, device=device).view(-1, group)
    return [rows[torch.tensor(part, device=device)].flatten() for part in parts]


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


def cached_share(
    prompt_mask: Tensor, response_mask: Tensor, parts: list[Tensor], group: int, by_length: bool
) -> float:
    """The same share for a cached pass's parts (``group_parts``; ``models.scoring``): each
    part's distinct prompts (a group's first row) once, trimmed to its longest prompt, then its
    responses, all trimmed to the longest (``by_length`` False) or by length
    (``models.shared_prefix.response_passes``)."""
    positions = used = 0
    for part in parts:
        prompts = prompt_mask[part[::group]].bool().sum(dim=1)
        responses = response_mask[part].bool().sum(dim=1).clamp_min(1)  # one runs at least
        positions += len(prompts) * int(prompts.max())
        used += int(prompts.sum()) + int(responses.sum())
        lengths = responses.tolist()
        passes = sorted_parts(lengths, None) if by_length else [list(range(len(lengths)))]
        positions += sum(len(rows) * max(lengths[i] for i in rows) for rows in passes)
    return 1.0 - used / max(positions, 1)
