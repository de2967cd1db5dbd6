"""``algorithms.turn_credit``: rewards placed on each turn's last sampled token, and GAE with one
step per turn, by hand (issue 50, part 4)."""

import torch
from torch.testing import assert_close

from astrai.algorithms.advantages import compute_gae
from astrai.algorithms.turn_credit import (
    last_sampled_positions,
    token_rewards_of_turns,
    turn_level_gae,
)

# an episode: prompt (turn 0), turn 1 samples 2 tokens, an observation, turn 2 samples 3 tokens,
# an observation, turn 3 samples nothing (cut)
TURNS = torch.tensor([[0, 0, 1, 1, 1, 2, 2, 2, 2, 3]])
MASK = torch.tensor([[False, False, True, True, False, True, True, True, False, False]])


def test_rewards_land_on_each_turns_last_sampled_token() -> None:
    assert last_sampled_positions(MASK, TURNS, 3).tolist() == [[3, 7, -1]]
    rewards = token_rewards_of_turns(
        MASK, TURNS, torch.tensor([[0.5, -0.25, 9.0]]), torch.tensor([1.0])
    )
    # turn 1's 0.5 at 3; turn 2's -0.25 and the episode's 1.0 at 7; turn 3 sampled nothing
    assert rewards.tolist() == [[0, 0, 0, 0.5, 0, 0, 0, 0.75, 0, 0]]


def test_turn_level_gae_by_hand() -> None:
    # turn 1: r = 0.5, V = 0.2 (value at position 2); turn 2: r = 1.0, V = 0.6 (position 5)
    # gamma 0.9, lam 0.5: delta_2 = 1 - 0.6 = 0.4 = A_2; delta_1 = 0.5 + 0.9*0.6 - 0.2 = 0.84,
    # A_1 = 0.84 + 0.45*0.4 = 1.02; returns A + V: 1.22 (turn 1), 1.0 (turn 2)
    rewards = torch.tensor([[9.0, 9, 0, 0.5, 9, 0, 0, 1.0, 9, 9]], dtype=torch.float64)
    values = torch.tensor([[7.0, 7, 0.2, 0.3, 7, 0.6, 0.1, 0.4, 7, 7]], dtype=torch.float64)
    advantages, returns = turn_level_gae(rewards, values, MASK, TURNS, 3, gamma=0.9, lam=0.5)
    expected = torch.tensor([[0, 0, 1.02, 1.02, 0, 0.4, 0.4, 0.4, 0, 0]], dtype=torch.float64)
    assert_close(advantages, expected)
    assert_close(returns, torch.tensor([[0, 0, 1.22, 1.22, 0, 1, 1, 1, 0, 0]], dtype=torch.float64))


def test_one_token_turns_are_token_level_gae() -> None:
    """With one sampled token a turn, the turn-level recursion is the token-level one."""
    generator = torch.Generator().manual_seed(0)
    mask = torch.tensor([[True, False, True, False, False, True]])
    turns = torch.tensor([[1, 1, 2, 2, 2, 3]])
    rewards = torch.randn(1, 6, generator=generator, dtype=torch.float64)
    values = torch.randn(1, 6, generator=generator, dtype=torch.float64)
    by_turn = turn_level_gae(rewards, values, mask, turns, 3, gamma=0.97, lam=0.9)
    by_token = compute_gae(rewards, values, mask, gamma=0.97, lam=0.9)
    assert_close(by_turn[0], by_token[0])
    assert_close(by_turn[1], by_token[1])
