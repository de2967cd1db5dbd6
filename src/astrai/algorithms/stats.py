"""Diagnostics computed from rollout tensors (not losses; nothing here is differentiated)."""

import torch
from torch import Tensor

from astrai.algorithms.masked import SumFn, local_sum, masked_var


@torch.no_grad()
def explained_variance(
    values: Tensor, returns: Tensor, mask: Tensor, sum_over_ranks: SumFn = local_sum
) -> float:
    """Fraction of the variance of the returns that the critic's values explain.

    ``1 - Var(returns - values) / Var(returns)`` over valid tokens, population variances. 1 is a
    perfect critic, 0 is no better than a constant, negative is worse than a constant.

    Args:
        values: ``[N, R]`` critic values.
        returns: ``[N, R]`` value targets.
        mask: ``[N, R]`` bool, True = token counts.
        sum_over_ranks: sums a tensor over the ranks, for the variances of the whole
            (distributed) rollout; the identity in one process.

    Returns:
        The explained variance, or ``nan`` when the returns have zero variance (undefined).
    """
    var_returns = masked_var(returns, mask, sum_over_ranks)
    if var_returns.item() == 0:
        return float("nan")
    return (1 - masked_var(returns - values, mask, sum_over_ranks) / var_returns).item()
