"""Tests for astrai.algorithms.stats."""

import math

import torch

from astrai.algorithms.stats import explained_variance


def test_explained_variance_hand_value():
    # returns [1, 2, 3, 4]: mean 2.5, population var (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
    # returns - values = [0, 0, 0, 1]: mean 0.25, var (3 * 0.0625 + 0.5625) / 4 = 0.1875
    # EV = 1 - 0.1875 / 1.25 = 0.85; the fifth (masked) token is junk and must not count
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 1e6]])
    values = torch.tensor([[1.0, 2.0, 3.0, 3.0, -1e6]])
    mask = torch.tensor([[True, True, True, True, False]])
    ev = explained_variance(values, returns, mask)
    assert isinstance(ev, float)
    assert math.isclose(ev, 0.85, rel_tol=1e-6)


def test_explained_variance_perfect_and_constant_offset_critic():
    returns = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    assert explained_variance(returns, returns, mask) == 1.0
    # a constant offset leaves a zero-variance residual: still 1
    assert math.isclose(explained_variance(returns + 3.0, returns, mask), 1.0)
    # a constant critic at the mean explains nothing: 0
    assert math.isclose(
        explained_variance(torch.full((2, 2), 0.625), returns, mask), 0.0, abs_tol=1e-7
    )


def test_explained_variance_nan_when_returns_constant():
    returns = torch.tensor([[2.0, 2.0, 2.0, 7.0]])
    values = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    mask = torch.tensor([[True, True, True, False]])
    assert math.isnan(explained_variance(values, returns, mask))
