"""Tests for astrai.algorithms.advantages."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from astrai.algorithms.advantages import compute_gae, group_advantages


def test_group_advantages_hand_values():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0], [3.0, 1.0, 2.0, 2.0]])
    eps = 1e-6
    # row 0: mean 0.5, population std 0.5 -> +-0.5 / (0.5 + eps) ~ +-1
    # row 1: all equal -> exactly 0
    # row 2: mean 2, deviations 1, -1, 0, 0, population var 2/4 -> std sqrt(0.5)
    a = 0.5 / (0.5 + eps)
    b = 1.0 / (0.5**0.5 + eps)
    expected = torch.tensor([[a, -a, -a, a], [0.0, 0.0, 0.0, 0.0], [b, -b, 0.0, 0.0]])
    assert_close(group_advantages(rewards, eps=eps), expected)


def test_group_advantages_constant_group_is_exactly_zero():
    # In float32 the mean of eight 0.1s is off by ~7e-9, so (r - mean) / (std + eps) alone would
    # give ~0.007 instead of 0: the all-equal group must be special-cased.
    rewards = torch.tensor([[0.1] * 8, [0.7] * 8, [2.0] * 8])
    advantages = group_advantages(rewards)
    assert torch.equal(advantages, torch.zeros(3, 8))


_REWARD = st.floats(-100, 100, allow_nan=False)
_GROUPS = st.integers(2, 8).flatmap(
    lambda g: st.lists(st.lists(_REWARD, min_size=g, max_size=g), min_size=1, max_size=4)
)


@settings(max_examples=200, deadline=None)
@given(_GROUPS)
def test_group_advantages_rows_have_zero_mean_and_scaled_unit_std(rows):
    rewards = torch.tensor(rows, dtype=torch.float64)
    eps = 1e-6
    advantages = group_advantages(rewards, eps=eps)
    zeros = torch.zeros(len(rows), dtype=torch.float64)
    assert_close(advantages.mean(dim=-1), zeros, atol=1e-9, rtol=0)
    # (r - mean) / (std + eps) has population std exactly std / (std + eps)
    std = rewards.std(dim=-1, correction=0)
    constant = (rewards == rewards[:, :1]).all(dim=-1)
    expected_std = torch.where(constant, zeros, std / (std + eps))
    assert_close(advantages.std(dim=-1, correction=0), expected_std)


def test_gae_hand_values():
    # gamma 0.9, lam 0.5 -> gamma * lam = 0.45; V after the last token = 0
    # delta_2 = 1 + 0.9 * 0   - 0.7 = 0.3
    # delta_1 = 0 + 0.9 * 0.7 - 0.6 = 0.03
    # delta_0 = 0 + 0.9 * 0.6 - 0.5 = 0.04
    # A_2 = 0.3
    # A_1 = 0.03 + 0.45 * 0.3   = 0.165
    # A_0 = 0.04 + 0.45 * 0.165 = 0.11425
    # returns = A + V = [0.61425, 0.765, 1.0]
    rewards = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 0.6, 0.7]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    advantages, returns = compute_gae(rewards, values, mask, gamma=0.9, lam=0.5)
    assert_close(advantages, torch.tensor([[0.11425, 0.165, 0.3]], dtype=torch.float64))
    assert_close(returns, torch.tensor([[0.61425, 0.765, 1.0]], dtype=torch.float64))


def test_gae_padding_is_neither_read_nor_written():
    # Row 0 is the hand-computed sequence above padded with junk; row 1 has one valid token:
    # delta_0 = 2 + 0.9 * 0 - 0.5 = 1.5 = A_0, return 2.0.
    rewards = torch.tensor([[0.0, 0.0, 1.0, 1e6, -1e6], [2.0, 3e5, -7e4, 1e6, 9e5]])
    values = torch.tensor([[0.5, 0.6, 0.7, 1e6, 5e5], [0.5, -4e5, 8e5, 2e6, -1e6]])
    mask = torch.tensor([[True, True, True, False, False], [True, False, False, False, False]])
    advantages, returns = compute_gae(rewards, values, mask, gamma=0.9, lam=0.5)
    expected_advantages = torch.tensor([[0.11425, 0.165, 0.3, 0, 0], [1.5, 0, 0, 0, 0]])
    expected_returns = torch.tensor([[0.61425, 0.765, 1.0, 0, 0], [2.0, 0, 0, 0, 0]])
    assert_close(advantages, expected_advantages)
    assert_close(returns, expected_returns)
    assert torch.all(advantages[~mask] == 0) and torch.all(returns[~mask] == 0)


def test_gae_gamma_lambda_one_gives_reward_to_go():
    # With gamma = lam = 1 the deltas telescope: A_t = sum_{k>=t} r_k - V_t, so returns are the
    # reward-to-go whatever the values: row 0 [1+2+3, 2+3, 3], row 1 (2 valid) [1+2, 2, 0].
    rewards = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 99.0]])
    values = torch.tensor([[0.3, -1.0, 5.0], [4.0, 0.5, 99.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    advantages, returns = compute_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert_close(returns, torch.tensor([[6.0, 5.0, 3.0], [3.0, 2.0, 0.0]]))
    assert_close(advantages, torch.tensor([[5.7, 6.0, -2.0], [-1.0, 1.5, 0.0]]))


def test_gae_lambda_zero_gives_one_step_td_error():
    # lam = 0 -> A_t = delta_t = [0.04, 0.03, 0.3] for the hand-computed sequence
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    advantages, _ = compute_gae(rewards, values, mask, gamma=0.9, lam=0.0)
    assert_close(advantages, torch.tensor([[0.04, 0.03, 0.3]]))
