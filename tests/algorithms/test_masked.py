"""Tests for astrai.algorithms.masked."""

import math
import threading
from collections.abc import Callable

import torch
from torch import Tensor
from torch.testing import assert_close

from astrai.algorithms.masked import (
    SumFn,
    masked_global_mean,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[True, True, False], [True, False, False]])
# Same valid entries, garbage (including inf) where the mask is False.
X_GARBAGE = torch.tensor([[1.0, 2.0, math.inf], [4.0, -1e30, 7e20]])


def test_masked_sum_all_and_per_dim():
    # valid: 1, 2 | 4  -> total 7; rows [3, 4]; columns [1+4, 2, 0]
    assert_close(masked_sum(X, MASK), torch.tensor(7.0))
    assert_close(masked_sum(X, MASK, dim=1), torch.tensor([3.0, 4.0]))
    assert_close(masked_sum(X, MASK, dim=0), torch.tensor([5.0, 2.0, 0.0]))


def test_masked_mean_all_and_per_dim():
    # total 7 over 3 valid -> 7/3; rows 3/2 and 4/1; columns 5/2, 2/1, and 0 for the empty one
    assert_close(masked_mean(X, MASK), torch.tensor(7.0 / 3.0))
    assert_close(masked_mean(X, MASK, dim=1), torch.tensor([1.5, 4.0]))
    assert_close(masked_mean(X, MASK, dim=0), torch.tensor([2.5, 2.0, 0.0]))


def test_masked_mean_empty_mask_is_zero_not_nan():
    empty = torch.zeros_like(MASK)
    assert_close(masked_mean(X, empty), torch.tensor(0.0))
    assert_close(masked_mean(X, empty, dim=1), torch.tensor([0.0, 0.0]))


def test_invalid_positions_do_not_change_results():
    assert_close(masked_sum(X_GARBAGE, MASK), masked_sum(X, MASK))
    assert_close(masked_mean(X_GARBAGE, MASK, dim=0), masked_mean(X, MASK, dim=0))
    assert_close(masked_var(X_GARBAGE, MASK), masked_var(X, MASK))
    assert_close(masked_whiten(X_GARBAGE, MASK), masked_whiten(X, MASK))


def test_masked_var_is_population_variance():
    # valid 1, 2, 4: mean 7/3, deviations -4/3, -1/3, 5/3, squares 16/9 + 1/9 + 25/9 = 42/9,
    # divided by the count 3 (not 2) -> 14/9
    assert_close(masked_var(X, MASK), torch.tensor(14.0 / 9.0))


def test_masked_whiten_hand_values():
    x = torch.tensor([1.0, 3.0, 100.0])
    mask = torch.tensor([True, True, False])
    # valid 1, 3: mean 2, population var 1 -> (x - 2) / 1 = [-1, 1]; padding -> 0
    assert_close(masked_whiten(x, mask, eps=0.0), torch.tensor([-1.0, 1.0, 0.0]))
    # shift_mean=False adds the mean back: [1, 3]
    assert_close(masked_whiten(x, mask, shift_mean=False, eps=0.0), torch.tensor([1.0, 3.0, 0.0]))
    # eps enters under the square root: 1 / sqrt(1 + 3) = 0.5
    assert_close(masked_whiten(x, mask, eps=3.0), torch.tensor([-0.5, 0.5, 0.0]))


def test_masked_whiten_gives_zero_mean_unit_variance():
    torch.manual_seed(0)
    x = torch.randn(4, 7) * 5 + 3
    mask = torch.rand(4, 7) > 0.3
    whitened = masked_whiten(x, mask)
    assert_close(masked_mean(whitened, mask), torch.tensor(0.0), atol=1e-5, rtol=0)
    assert_close(masked_var(whitened, mask), torch.tensor(1.0), atol=1e-5, rtol=0)
    assert torch.all(whitened[~mask] == 0)


def test_masked_mean_token_count_gives_each_rank_its_share_of_the_global_mean():
    # rank A holds tokens 1, 2 (and a masked 3), rank B holds 4: the global token mean is 7/3.
    # token_count = global tokens / world size = 3/2; A's share 3/1.5 = 2, B's 4/1.5 = 8/3, and
    # their average (what DDP does to gradients) is (2 + 8/3) / 2 = 7/3
    a = masked_mean(X[0], MASK[0], token_count=1.5)
    b = masked_mean(X[1], MASK[1], token_count=1.5)
    assert_close(a, torch.tensor(2.0))
    assert_close(b, torch.tensor(8.0 / 3.0))
    assert_close((a + b) / 2, masked_mean(X, MASK))


def _on_two_ranks(fn: Callable[[Tensor, Tensor, SumFn], Tensor]) -> list[Tensor]:
    """``fn(x_row, mask_row, sum_over_ranks)`` for the two rows of X as two ranks (threads)
    whose ``sum_over_ranks`` adds both ranks' tensors, as an all-reduce would."""
    barrier = threading.Barrier(2)
    slots: list[Tensor | None] = [None, None]
    results: list[Tensor | None] = [None, None]

    def run(rank: int) -> None:
        def sum_over_ranks(t: Tensor) -> Tensor:
            slots[rank] = t
            barrier.wait()
            total = slots[0] + slots[1]  # type: ignore[operator]
            barrier.wait()  # both have read before either writes its next tensor
            return total

        results[rank] = fn(X[rank], MASK[rank], sum_over_ranks)

    threads = [threading.Thread(target=run, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results  # type: ignore[return-value]


def test_global_statistics_over_two_ranks_equal_one_process():
    # rank 0: 1, 2; rank 1: 4 -> the mean 7/3 and variance 14/9 of all three tokens on each rank
    means = _on_two_ranks(masked_global_mean)
    variances = _on_two_ranks(lambda x, m, s: masked_var(x, m, s))
    for mean, var in zip(means, variances, strict=True):
        assert_close(mean, torch.tensor(7.0 / 3.0))
        assert_close(var, torch.tensor(14.0 / 9.0))
    whitened = _on_two_ranks(lambda x, m, s: masked_whiten(x, m, sum_over_ranks=s))
    assert_close(torch.stack(whitened), masked_whiten(X, MASK))
    # without the reduction each rank whitens alone: rank 1's single token becomes 0
    assert masked_whiten(X[1], MASK[1])[0] == 0 and masked_whiten(X, MASK)[1, 0] > 1
