"""Advantage estimators: group-relative (GRPO) and generalised advantage estimation (PPO).

References:
    Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
    Language Models" (GRPO, outcome supervision: rewards normalised within each group).
    Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
    Estimation" (GAE).
"""

import torch
from torch import Tensor


def group_advantages(rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """GRPO advantages: each reward standardised within its group of responses to one prompt.

    Args:
        rewards: ``[B, G]``, G sampled responses for each of B prompts.
        eps: added to the group's standard deviation.

    Returns:
        ``[B, G]``, ``(r - mean_group) / (std_group + eps)`` with the population std
        (``correction=0``). A group whose rewards are all equal gets exactly 0: it carries no
        learning signal, and ``r - mean`` alone may be off by rounding error.
    """
    mean = rewards.mean(dim=-1, keepdim=True)
    std = rewards.std(dim=-1, correction=0, keepdim=True)
    advantages = (rewards - mean) / (std + eps)
    constant = (rewards == rewards[..., :1]).all(dim=-1, keepdim=True)
    return torch.where(constant, torch.zeros_like(advantages), advantages)


def compute_gae(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over right-padded token sequences.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` and ``A_t = delta_t + gamma * lam * A_{t+1}``,
    with ``V`` and ``A`` after the last valid token taken as 0 (the response ended: terminal
    bootstrap 0). Padded positions are never read and are 0 in both outputs.

    Args:
        rewards: ``[..., R]`` per-token rewards.
        values: ``[..., R]`` critic values ``V_t``; pass them detached unless you want
            gradients through the targets.
        mask: ``[..., R]`` bool, True = valid token; valid tokens are a prefix of each row.
        gamma: discount factor in [0, 1].
        lam: GAE lambda in [0, 1].

    Returns:
        ``(advantages, returns)``, both ``[..., R]``; ``returns = advantages + values`` at valid
        positions, 0 elsewhere.
    """
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    # Zeroed padding makes V_{t+1} = 0 after the last valid token; padded rewards only reach
    # advantages that the torch.where below discards.
    values = torch.where(mask, values, zero)
    next_value = torch.zeros_like(values[..., 0])
    next_advantage = torch.zeros_like(values[..., 0])
    reversed_advantages = []
    for t in reversed(range(values.shape[-1])):
        delta = rewards[..., t] + gamma * next_value - values[..., t]
        advantage = torch.where(mask[..., t], delta + gamma * lam * next_advantage, zero)
        reversed_advantages.append(advantage)
        next_value, next_advantage = values[..., t], advantage
    advantages = torch.stack(reversed_advantages[::-1], dim=-1)
    # Both terms are already 0 at padded positions.
    return advantages, advantages + values
