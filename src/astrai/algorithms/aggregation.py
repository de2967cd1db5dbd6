"""Loss aggregation: how per-token losses become one scalar (``train_type.loss_agg``).

Every mode is a weighted sum of the per-token losses divided by one count of the *whole*
minibatch — its valid tokens or its sequences — so a minibatch split into micro-batches, or
over data-parallel ranks, gives the same loss and gradients once each part divides by the whole
minibatch's count (``Divisors``; a trainer with ``W`` ranks passes the global count over ``W``,
and DDP's gradient average restores the global value).

Modes (per-token loss ``l``, mask ``m``, ``L_i`` valid tokens of sequence ``i``, ``S``
sequences, ``T = Σ_i L_i`` tokens):

- ``token_mean``: ``Σ l / T`` — every token weighs the same (DAPO; astrai's default).
- ``seq_mean_token_mean``: ``1/S Σ_i (Σ_t l_it / L_i)`` — every sequence weighs the same
  (the GRPO paper).
- ``seq_mean_token_sum``: ``1/S Σ_i Σ_t l_it`` — a sequence weighs by its length.
- ``seq_mean_token_sum_norm``: ``1/S Σ_i Σ_t l_it / norm_len`` with a constant ``norm_len``
  (Dr. GRPO, Liu et al. 2025: no length in the divisor, so no bias towards long wrong answers).

References:
    Shao et al. 2024, "DeepSeekMath" (GRPO); Yu et al. 2025, "DAPO"; Liu et al. 2025,
    "Understanding R1-Zero-Like Training: A Critical Perspective" (Dr. GRPO).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from astrai.algorithms.masked import SumFn, local_sum, masked_mean, masked_sum

LOSS_AGG_MODES = (
    "token_mean",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
)


@dataclass(frozen=True)
class Divisors:
    """The whole minibatch's counts that divide its means (over every rank, divided by the
    world size): ``tokens`` valid tokens, ``sequences`` sequences with at least one."""

    tokens: float
    sequences: float


def count_divisors(mask: Tensor) -> tuple[Tensor, Tensor]:
    """``[N, R]`` bool mask -> (valid tokens, sequences with a valid token), float64 scalars
    (one tensor each, so a trainer can sum them over ranks in one collective)."""
    return mask.sum().double(), mask.any(-1).sum().double()


def aggregate_loss(
    per_token: Tensor,
    mask: Tensor,
    mode: str = "token_mean",
    norm_len: float | None = None,
    divisors: Divisors | None = None,
) -> Tensor:
    """One scalar from per-token values, as ``mode`` says (module docstring).

    Args:
        per_token: ``[N, R]`` per-token losses (padding may hold anything).
        mask: ``[N, R]`` bool, True = the token counts.
        mode: one of ``LOSS_AGG_MODES``.
        norm_len: the constant divisor of ``seq_mean_token_sum_norm`` (``max_new_tokens``).
        divisors: the whole minibatch's counts; None = this tensor's own (one process, no
            micro-batching). A sequence without a valid token counts in neither.

    Returns:
        Scalar loss; 0 when nothing is valid.
    """
    if mode == "token_mean":  # exactly the pre-aggregation-option loss, bit for bit
        tokens = None if divisors is None else divisors.tokens
        return masked_mean(per_token, mask, token_count=tokens)
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {LOSS_AGG_MODES}")
    per_sequence = masked_sum(per_token, mask, dim=-1)  # [N]
    if mode == "seq_mean_token_mean":
        per_sequence = per_sequence / mask.sum(-1).clamp(min=1)
    elif mode == "seq_mean_token_sum_norm":
        if norm_len is None or norm_len <= 0:
            raise ValueError("seq_mean_token_sum_norm needs norm_len > 0 (max_new_tokens)")
        per_sequence = per_sequence / norm_len
    if divisors is None:
        sequences = float(max(int(mask.any(-1).sum()), 1))
    else:
        sequences = divisors.sequences
    return per_sequence.sum() / sequences


def whole_minibatch_divisors(
    mask: Tensor, sum_over_ranks: SumFn = local_sum, world_size: int = 1
) -> Divisors:
    """The divisors of a minibatch (``[N, R]`` loss mask): its counts (at least 1 each) summed
    over the ranks in one collective and divided by the world size, so that the ranks' losses
    (and the gradients DDP averages) average to the global value; in one process its own."""
    counts = sum_over_ranks(torch.stack(count_divisors(mask)))
    tokens, sequences = counts.tolist()
    return Divisors(max(tokens, 1.0) / world_size, max(sequences, 1.0) / world_size)
