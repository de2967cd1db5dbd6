"""Masked reductions over token tensors.

Masks are bool tensors where True marks a position that counts (a real response token); the
values at False positions are never read, so padding may hold anything, even ``inf``.

Full reductions (``dim=None``) are over the *global* batch when the run is distributed, so a
statistic or a token-mean loss is the same as one process would compute over all ranks' tokens
(see ``masked_mean``). In one process they are plain reductions.
"""

import torch
from torch import Tensor

from astrai.distributed import all_reduce_sum, world_size


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


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is True.

    A slice without any valid position has mean 0 (not NaN), so an all-padding row is harmless.

    Args:
        x: values, any shape ``[...]``.
        mask: bool, broadcastable to ``x``; True = counts.
        dim: dimension to reduce; ``None`` reduces over all elements.

    Returns:
        Scalar when ``dim`` is None, else ``x`` with ``dim`` removed.
    """
    count = masked_sum(torch.ones_like(x), mask, dim)
    if dim is not None or world_size() == 1:
        return masked_sum(x, mask, dim) / count.clamp(min=1)
    # Distributed, full reduction: divide by the global token count. A value that carries
    # gradients (a loss) stays this rank's share, scaled by the world size, because DDP
    # averages gradients over ranks: the mean of the shares' gradients is the gradient of the
    # global token mean. A value without gradients (a statistic) is summed over ranks.
    global_count = all_reduce_sum(count).clamp(min=1)
    local = masked_sum(x, mask)
    if torch.is_grad_enabled() and local.requires_grad:
        return local * world_size() / global_count
    return all_reduce_sum(local) / global_count


def masked_var(x: Tensor, mask: Tensor) -> Tensor:
    """Population variance (divide by the count, not count - 1) of the valid elements of ``x``.

    Args:
        x: values, any shape ``[...]``.
        mask: bool, broadcastable to ``x``; True = counts.

    Returns:
        Scalar variance; 0 when no element is valid.
    """
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask)


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Normalise the valid elements of ``x`` to zero mean and unit variance.

    Args:
        x: values, any shape ``[...]``.
        mask: bool, same shape as ``x``; True = counts.
        shift_mean: if False, add the mean back so only the scale changes.
        eps: added to the variance before the square root.

    Returns:
        ``(x - mean) / sqrt(var + eps)`` (plus ``mean`` if not ``shift_mean``), shape of ``x``,
        with 0 at invalid positions.
    """
    mean = masked_mean(x, mask)
    whitened = (x - mean) * torch.rsqrt(masked_var(x, mask) + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask, whitened, torch.zeros((), dtype=x.dtype, device=x.device))
