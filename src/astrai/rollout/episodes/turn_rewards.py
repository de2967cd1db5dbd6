"""Where a multi-turn episode's rewards land (issue 50, part 4): each turn's on its last sampled
token, the episode's on its last sampled token. Tensors are ``[..., T]`` over an episode's
tokens, ``mask`` True on its sampled tokens and ``turns`` the turn each token belongs to (0: the
prompt; observations carry their turn's number, masked). ``algorithms.turn_credit`` builds the
turn-level GAE on these.
"""

import torch
from torch import Tensor


def last_sampled_positions(mask: Tensor, turns: Tensor, turn_count: int) -> Tensor:
    """``[..., K]``: the position of each turn's last trainable token (turns ``1 .. K``); -1
    for a turn with none (cut before it sampled anything)."""
    t = mask.shape[-1]
    positions = torch.arange(t, device=mask.device).expand_as(mask)
    found = []
    for turn in range(1, turn_count + 1):
        at = torch.where(mask & (turns == turn), positions, torch.full_like(positions, -1))
        found.append(at.amax(dim=-1))
    return torch.stack(found, dim=-1)


def token_rewards_of_turns(
    mask: Tensor, turns: Tensor, turn_rewards: Tensor, final_reward: Tensor
) -> Tensor:
    """Per-token rewards: each turn's reward (``turn_rewards [..., K]``) on its last sampled
    token, the episode's (``final_reward [...]``) on the episode's last sampled token; 0
    elsewhere. A turn that sampled nothing drops its reward (there is no action to credit)."""
    rewards = torch.zeros(mask.shape, dtype=turn_rewards.dtype, device=mask.device)
    last = last_sampled_positions(mask, turns, turn_rewards.shape[-1])
    placed = turn_rewards.masked_fill(last < 0, 0.0)
    rewards.scatter_add_(-1, last.clamp_min(0), placed)
    episode_last = last.amax(dim=-1, keepdim=True)
    rewards.scatter_add_(-1, episode_last.clamp_min(0), final_reward[..., None])
    return rewards
