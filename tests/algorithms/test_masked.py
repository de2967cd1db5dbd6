"""Tests for astrai.algorithms.masked."""

import math

import torch
from torch.testing import assert_close

from astrai.algorithms.masked import masked_mean, masked_sum, masked_var, masked_whiten

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
