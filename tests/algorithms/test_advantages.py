"""Tests for astrai.algorithms.advantages."""

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from astrai.algorithms.advantages import (
    compute_gae,
    group_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)


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


def test_gae_skips_masked_spans_between_valid_tokens():
    """Issue 50: a multi-turn episode's observation tokens (masked) between two turns are not
    time steps. The hand-computed sequence above with observation spans inserted: its valid
    tokens get the same advantages and returns, whatever the spans hold."""
    junk = 7e5  # values and rewards at masked positions: never read
    rewards = torch.tensor([[0.0, junk, junk, 0.0, junk, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, -junk, junk, 0.6, junk, 0.7]], dtype=torch.float64)
    mask = torch.tensor([[True, False, False, True, False, True]])
    advantages, returns = compute_gae(rewards, values, mask, gamma=0.9, lam=0.5)
    assert_close(advantages, torch.tensor([[0.11425, 0, 0, 0.165, 0, 0.3]], dtype=torch.float64))
    assert_close(returns, torch.tensor([[0.61425, 0, 0, 0.765, 0, 1.0]], dtype=torch.float64))


def test_gae_of_valid_tokens_is_unchanged_by_any_masked_spans():
    """Random spans of any length inserted between (and after) valid tokens: the valid tokens'
    advantages and returns are bitwise those of the rows without the spans."""
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randn(4, 6, generator=generator)
    values = torch.randn(4, 6, generator=generator)
    compact = torch.ones(4, 6, dtype=torch.bool)
    expected = compute_gae(rewards, values, compact, gamma=0.97, lam=0.9)
    for _ in range(5):
        gaps = torch.randint(0, 4, (6,), generator=generator).tolist()
        width = 6 + sum(gaps)
        positions = torch.tensor([i + sum(gaps[:i]) for i in range(6)])  # spans after each
        spread_r = torch.randn(4, width, generator=generator) * 1e3
        spread_v = torch.randn(4, width, generator=generator) * 1e3
        spread_r[:, positions], spread_v[:, positions] = rewards, values
        mask = torch.zeros(4, width, dtype=torch.bool)
        mask[:, positions] = True
        advantages, returns = compute_gae(spread_r, spread_v, mask, gamma=0.97, lam=0.9)
        assert torch.equal(advantages[:, positions], expected[0])
        assert torch.equal(returns[:, positions], expected[1])
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


# --- the issue-19 estimators on one [2, 4] reward example, by hand ---
#   row 0: [1, 0, 1, 2]  mean 1, deviations [0, -1, 0, 1], population var 2/4 -> std sqrt(1/2)
#   row 1: [5, 5, 1, 1]  mean 3, deviations [2, 2, -2, -2], population var 4  -> std 2
#   all 8: mean 16/8 = 2, squared deviations 1, 4, 1, 0, 9, 9, 1, 1 = 26 -> var 26/8 = 3.25,
#          batch std sqrt(13)/2 ~ 1.8028
REWARDS = torch.tensor([[1.0, 0.0, 1.0, 2.0], [5.0, 5.0, 1.0, 1.0]], dtype=torch.float64)
CENTRED = torch.tensor([[0.0, -1.0, 0.0, 1.0], [2.0, 2.0, -2.0, -2.0]], dtype=torch.float64)
EPS = 1e-6


def test_group_advantages_scale_group_hand_values():
    std = torch.tensor([[0.5**0.5], [2.0]], dtype=torch.float64)
    a = 1.0 / (0.5**0.5 + EPS)  # ~ 1.41421
    b = 2.0 / (2.0 + EPS)  # ~ 1
    expected = torch.tensor([[0.0, -a, 0.0, a], [b, b, -b, -b]], dtype=torch.float64)
    assert_close(group_advantages(REWARDS, eps=EPS, scale="group"), expected)
    assert_close(expected, CENTRED / (std + EPS))


def test_group_advantages_scale_batch_hand_values():
    # centred on the group's mean, divided by the batch std sqrt(3.25)
    s = 3.25**0.5 + EPS
    expected = torch.tensor(
        [[0.0, -1.0 / s, 0.0, 1.0 / s], [2.0 / s, 2.0 / s, -2.0 / s, -2.0 / s]],
        dtype=torch.float64,
    )
    assert_close(group_advantages(REWARDS, eps=EPS, scale="batch"), expected)
    # 2 / sqrt(3.25) = 4 / sqrt(13) ~ 1.1094004 (less ~6e-7 for eps)
    assert_close(expected[1, 0], torch.tensor(1.1094004, dtype=torch.float64), atol=1e-6, rtol=0)


def test_group_advantages_scale_none_is_the_centred_reward():
    assert_close(group_advantages(REWARDS, eps=EPS, scale="none"), CENTRED)


def test_group_advantages_unknown_scale_raises():
    with pytest.raises(ValueError, match="unknown advantage scale"):
        group_advantages(REWARDS, scale="global")


def test_rloo_advantages_hand_values():
    # A_i = r_i - (sum - r_i) / 3
    # row 0, sum 4:  [1 - 3/3, 0 - 4/3, 1 - 3/3, 2 - 2/3]   = [0, -4/3, 0, 4/3]
    # row 1, sum 12: [5 - 7/3, 5 - 7/3, 1 - 11/3, 1 - 11/3] = [8/3, 8/3, -8/3, -8/3]
    expected = torch.tensor(
        [[0.0, -4 / 3, 0.0, 4 / 3], [8 / 3, 8 / 3, -8 / 3, -8 / 3]], dtype=torch.float64
    )
    assert_close(rloo_advantages(REWARDS), expected)
    assert_close(expected, CENTRED * 4 / 3)  # G / (G - 1) (r - mean)


def test_rloo_needs_two_responses_per_prompt():
    with pytest.raises(ValueError, match="at least 2"):
        rloo_advantages(torch.tensor([[1.0], [0.0]]))


@pytest.mark.parametrize(
    "estimator",
    [
        lambda r: group_advantages(r, scale="group"),
        lambda r: group_advantages(r, scale="batch"),
        lambda r: group_advantages(r, scale="none"),
        rloo_advantages,
    ],
    ids=["group", "batch", "none", "rloo"],
)
def test_constant_groups_are_exactly_zero_for_every_group_estimator(estimator):
    # row 0 constant (0.1 is inexact in float32), row 1 informative: row 0 must be exactly 0
    # while row 1 is not (under batch scaling the informative row sets the std)
    rewards = torch.tensor([[0.1, 0.1, 0.1, 0.1], [0.0, 1.0, 0.0, 1.0]])
    advantages = estimator(rewards)
    assert torch.equal(advantages[0], torch.zeros(4))
    assert (advantages[1] != 0).all()


class _FakeAllReduce:
    """``sum_over_ranks`` of ``world`` ranks simulated with threads in one process: every
    rank's call blocks until all ranks have called, then each gets the sum of all their
    tensors (added in rank order)."""

    def __init__(self, world: int) -> None:
        self.slots: list[torch.Tensor | None] = [None] * world
        self.barrier = threading.Barrier(world, timeout=30)

    def for_rank(self, rank: int):
        def sum_over_ranks(x: torch.Tensor) -> torch.Tensor:
            self.slots[rank] = x
            self.barrier.wait()
            total = sum(s for s in self.slots if s is not None)
            self.barrier.wait()  # nobody overwrites a slot before everyone has read it
            return total

        return sum_over_ranks


def _run_ranks(fn, parts: list) -> list:
    """``fn(part, sum_over_ranks)`` for every rank's part, concurrently."""
    reduce = _FakeAllReduce(len(parts))
    results: list = [None] * len(parts)

    def run(rank: int) -> None:
        results[rank] = fn(parts[rank], reduce.for_rank(rank))

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(len(parts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r is not None for r in results)
    return results


def test_batch_scale_over_two_fake_ranks_equals_one_process_over_the_concatenation():
    # rank 0 holds group [1, 0, 1, 2], rank 1 group [5, 5, 1, 1]: the batch std is the one of
    # all 8 rewards (sqrt(3.25)), not either rank's own (1/sqrt(2) and 2)
    whole = group_advantages(REWARDS, eps=EPS, scale="batch")
    ranks = _run_ranks(
        lambda part, sum_fn: group_advantages(part, eps=EPS, scale="batch", sum_over_ranks=sum_fn),
        [REWARDS[:1], REWARDS[1:]],
    )
    assert_close(torch.cat(ranks), whole)
    # and it differs from each rank scaling by its own std
    assert not torch.allclose(group_advantages(REWARDS[:1], eps=EPS, scale="batch"), whole[:1])


# REINFORCE++ on [2, 3] token rewards (nan in the padding: never read):
#   row 0 rewards [0, 0, 1]    -> returns (reverse cumsum) [1, 1, 1]
#   row 1 rewards [0.5, 2, pad] -> returns [2.5, 2, pad]
#   valid returns 1, 1, 1, 2.5, 2: mean 7.5/5 = 1.5, deviations [-.5, -.5, -.5], [1, .5]
#   population var (0.25 * 3 + 1 + 0.25) / 5 = 0.4; with eps 0.1: sqrt(0.4 + 0.1) = sqrt(1/2)
#   advantages = deviation * sqrt(2): [-.7071, -.7071, -.7071], [1.4142, .7071, 0]
TOKEN_REWARDS = torch.tensor([[0.0, 0.0, 1.0], [0.5, 2.0, float("nan")]], dtype=torch.float64)
TOKEN_MASK = torch.tensor([[True, True, True], [True, True, False]])


def test_reinforce_pp_hand_values():
    r2 = 2.0**0.5
    expected = torch.tensor(
        [[-0.5 * r2, -0.5 * r2, -0.5 * r2], [1.0 * r2, 0.5 * r2, 0.0]], dtype=torch.float64
    )
    advantages = reinforce_pp_advantages(TOKEN_REWARDS, TOKEN_MASK, eps=0.1)
    assert_close(advantages, expected)
    assert advantages[1, 2].item() == 0.0  # padding is 0
    # default eps 1e-8: divide by sqrt(0.4 + 1e-8)
    expected_default = (
        torch.tensor([[-0.5, -0.5, -0.5], [1.0, 0.5, 0.0]], dtype=torch.float64)
        / (0.4 + 1e-8) ** 0.5
    )
    assert_close(reinforce_pp_advantages(TOKEN_REWARDS, TOKEN_MASK), expected_default)


def test_reinforce_pp_over_two_fake_ranks_equals_one_process():
    whole = reinforce_pp_advantages(TOKEN_REWARDS, TOKEN_MASK, eps=0.1)
    ranks = _run_ranks(
        lambda part, sum_fn: reinforce_pp_advantages(part[0], part[1], sum_fn, eps=0.1),
        [(TOKEN_REWARDS[:1], TOKEN_MASK[:1]), (TOKEN_REWARDS[1:], TOKEN_MASK[1:])],
    )
    assert_close(torch.cat(ranks), whole)
