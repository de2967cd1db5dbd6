"""Masked reductions over token tensors.

Masks are bool tensors where True marks a position that counts (a real response token); the
values at False positions are never read, so padding may hold anything, even ``inf``.

Everything here computes on what it is given and talks to no other process. Two hooks let a
data-parallel caller get the global quantity without this module knowing about ranks:

- ``token_count``: the divisor of a full-reduction mean. A trainer with ``W`` ranks passes
  ``global_tokens / W``; each rank's result is then its share of the global token mean, and
  the average over ranks (what DDP does to gradients, and what the trainer does once to the
  logged values) is exactly the global token mean.
- ``sum_over_ranks``: a function that sums a tensor over the ranks (``local_sum``, the default,
  is the identity). Statistics that need the whole batch at once (variance, whitening) sum
  their moments with it. Its results carry no gradient in a distributed run.
"""

from collections.abc import Callable

import torch
from torch import Tensor

SumFn = Callable[[Tensor], Tensor]


def local_sum(x: Tensor) -> Tensor:
    """The ``sum_over_ranks`` of a single process: the tensor itself."""
    return x


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over positions where ``mask`` is True.

    Args:
        x: values, any shape ``[...]``.
        mask: bool, broadcastable to ``x``; True = counts.
        dim: dimension to reduce; ``None`` reduces over all elements.

    Returns:
        Scalar when ``dim`` is None, else ``x`` with ``dim`` removed.
    """
    # torch.where instead of x * mask: 0 * inf is NaN, and padding is allowed to hold anything.
    kept = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(
    x: Tensor, mask: Tensor, dim: int | None = None, token_count: float | None = None
) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is True.

    A slice without any valid position has mean 0 (not NaN), so an all-padding row is harmless.

    Args:
        x: values, any shape ``[...]``.
        mask: bool, broadcastable to ``x``; True = counts.
        dim: dimension to reduce; ``None`` reduces over all elements.
        token_count: divisor of a full reduction (``dim=None``) instead of the number of valid
            elements: a data-parallel caller's ``global_tokens / world_size`` (module docstring).

    Returns:
        Scalar when ``dim`` is None, else ``x`` with ``dim`` removed.
    """
    if token_count is not None:
        if dim is not None:
            raise ValueError("token_count applies to a full reduction (dim=None) only")
        return masked_sum(x, mask) / token_count
    count = masked_sum(torch.ones_like(x), mask, dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_global_mean(x: Tensor, mask: Tensor, sum_over_ranks: SumFn = local_sum) -> Tensor:
    """Mean of the valid elements of ``x`` over every rank's ``x`` (0 when none is valid).

    Args:
        x: values, any shape ``[...]``; this rank's part.
        mask: bool, broadcastable to ``x``; True = counts.
        sum_over_ranks: sums a tensor over the ranks (module docstring).

    Returns:
        Scalar mean; in one process exactly ``masked_mean(x, mask)``.
    """
    count = masked_sum(torch.ones_like(x), mask)
    totals = sum_over_ranks(torch.stack([masked_sum(x, mask), count]))  # one collective
    return totals[0] / totals[1].clamp(min=1)


def masked_var(x: Tensor, mask: Tensor, sum_over_ranks: SumFn = local_sum) -> Tensor:
    """Population variance (divide by the count, not count - 1) of the valid elements of ``x``.

    Two passes (mean first, then the mean squared deviation), over every rank's ``x``.

    Args:
        x: values, any shape ``[...]``.
        mask: bool, broadcastable to ``x``; True = counts.
        sum_over_ranks: sums a tensor over the ranks (module docstring).

    Returns:
        Scalar variance; 0 when no element is valid.
    """
    mean = masked_global_mean(x, mask, sum_over_ranks)
    return masked_global_mean((x - mean) ** 2, mask, sum_over_ranks)


def masked_whiten(
    x: Tensor,
    mask: Tensor,
    shift_mean: bool = True,
    eps: float = 1e-8,
    sum_over_ranks: SumFn = local_sum,
) -> Tensor:
    """Normalise the valid elements of ``x`` to zero mean and unit variance.

    Args:
        x: values, any shape ``[...]``.
        mask: bool, same shape as ``x``; True = counts.
        shift_mean: if False, add the mean back so only the scale changes.
        eps: added to the variance before the square root.
        sum_over_ranks: sums a tensor over the ranks: the mean and variance are those of every
            rank's ``x`` (module docstring).

    Returns:
        ``(x - mean) / sqrt(var + eps)`` (plus ``mean`` if not ``shift_mean``), shape of ``x``,
        with 0 at invalid positions.
    """
    mean = masked_global_mean(x, mask, sum_over_ranks)
    whitened = (x - mean) * torch.rsqrt(masked_var(x, mask, sum_over_ranks) + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask, whitened, torch.zeros((), dtype=x.dtype, device=x.device))
