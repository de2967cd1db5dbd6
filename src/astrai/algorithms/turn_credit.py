"""Credit in a multi-turn episode (issue 50, part 4): where its rewards land, and GAE with one
time step per turn (``turn_level_gae``; AReaL PR #1600's option).

Every tensor is ``[..., T]`` over an episode's tokens, ``mask`` True on its trainable (sampled)
tokens and ``turns`` the turn each token belongs to (0: the prompt; observations carry their
turn's number, masked).
"""

import torch
from torch import Tensor

# where rewards land is the rollout's to say (``rollout.episodes.rollout`` places them)
from astrai.rollout.episodes.turn_rewards import last_sampled_positions, token_rewards_of_turns

__all__ = ["last_sampled_positions", "token_rewards_of_turns", "turn_level_gae", "turns_of_runs"]


def turns_of_runs(mask: Tensor) -> Tensor:
    """``[..., T]`` long: each sampled token's turn, numbered from 1 along the runs of
    ``mask`` (a turn's sampled tokens are contiguous, observations lie between turns); 0 where
    ``mask`` is False."""
    before = torch.nn.functional.pad(mask[..., :-1], (1, 0), value=False)
    starts = mask & ~before
    return torch.where(mask, starts.long().cumsum(-1), torch.zeros_like(mask, dtype=torch.long))


def turn_level_gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    turns: Tensor,
    turn_count: int,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """GAE with one time step per turn: turn ``k``'s reward is the sum of its tokens' rewards,
    its value the critic's at its first sampled token (the state before the turn's action);
    ``delta_k = r_k + gamma * V_{k+1} - V_k``, ``A_k = delta_k + gamma * lam * A_{k+1}``, and
    every sampled token of turn ``k`` takes ``A_k`` (its return ``A_k + V_k``). Turns with no
    sampled token are skipped; after the last, ``V`` and ``A`` are 0.

    Returns:
        ``(advantages, returns)`` ``[..., T]``, 0 where ``mask`` is False.
    """
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    t = mask.shape[-1]
    positions = torch.arange(t, device=mask.device).expand_as(mask)
    next_value = torch.zeros_like(values[..., 0])
    next_advantage = torch.zeros_like(values[..., 0])
    advantages = torch.zeros_like(values)
    returns = torch.zeros_like(values)
    for turn in range(turn_count, 0, -1):
        in_turn = mask & (turns == turn)
        sampled = in_turn.any(dim=-1)
        first = torch.where(in_turn, positions, torch.full_like(positions, t)).amin(dim=-1)
        value = values.gather(-1, first.clamp_max(t - 1)[..., None]).squeeze(-1)
        value = torch.where(sampled, value, zero)
        reward = torch.where(in_turn, rewards, zero).sum(dim=-1)
        advantage = reward + gamma * next_value - value + gamma * lam * next_advantage
        advantage = torch.where(sampled, advantage, zero)
        advantages = torch.where(in_turn, advantage[..., None], advantages)
        returns = torch.where(in_turn, (advantage + value)[..., None], returns)
        next_value = torch.where(sampled, value, next_value)
        next_advantage = torch.where(sampled, advantage, next_advantage)
    return advantages, returns
