"""Per-token rewards for PPO: the task score on the last response token minus a KL penalty.

``r_t = −kl_coef · KL_t + [t = last valid token] · score`` (the reference-KL penalty folded into
the reward, as in Ziegler et al. 2019 and "The N Implementation Details of RLHF with PPO").
Also DAPO's soft overlong penalty on the sequence reward (``overlong_penalty``, defined in
``astrai.rewards.overlong`` so that the rollout layer below this one can apply it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from astrai.rewards.overlong import OVERLONG_TERM, OverlongPenalty, overlong_penalty

__all__ = [
    "KL_REWARD_CLAMP",
    "OVERLONG_TERM",
    "OverlongPenalty",
    "last_token_index",
    "overlong_penalty",
    "episode_token_rewards",
    "token_rewards",
]

# Per-token KL estimates are clamped to this magnitude before entering the rewards (as verl
# does for its k3 "low_var_kl"): a rarely sampled token with π ≪ π_ref has r = π_ref/π huge and
# k3 ≈ r, and one such outlier would dominate the whitened advantages of the whole rollout.
KL_REWARD_CLAMP = 10.0


def last_token_index(mask: Tensor) -> Tensor:
    """``[..., R]`` right-padded bool mask -> ``[...]`` index of the last valid token (−1: none)."""
    return mask.long().sum(-1) - 1


def token_rewards(scores: Tensor, kl: Tensor, mask: Tensor, kl_coef: float) -> Tensor:
    """Fold the per-token KL penalty and the sequence score into token rewards.

    Args:
        scores: ``[...]`` task reward per response.
        kl: ``[..., R]`` per-token KL estimate (behaviour vs reference).
        mask: ``[..., R]`` bool, right-padded; the score lands on the last True position (EOS,
            or the last generated token of a response cut at the length limit).
        kl_coef: weight of the penalty.

    Returns:
        ``[..., R]`` rewards, 0 at padding. An empty response gets all zeros (no token to carry
        its score).
    """
    rewards = torch.where(mask, -kl_coef * kl, torch.zeros_like(kl))
    last = last_token_index(mask)
    has_token = last >= 0
    index = last.clamp_min(0)[..., None]
    terminal = torch.where(has_token, scores.to(rewards.dtype), torch.zeros_like(scores))
    return rewards.scatter_add(-1, index, terminal[..., None].to(rewards.dtype))


def episode_token_rewards(scores: Tensor, kl: Tensor, mask: Tensor, kl_coef: float) -> Tensor:
    """``[..., R]`` token rewards of multi-turn episodes: the KL penalty on the sampled tokens
    (``mask``) plus ``scores``, the environment's rewards already on their tokens (each turn's
    on its last sampled token: ``algorithms.turn_credit.token_rewards_of_turns``)."""
    penalty = torch.where(mask, -kl_coef * kl, torch.zeros_like(kl))
    return penalty + scores.to(penalty.dtype)
