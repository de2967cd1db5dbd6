"""Advantage estimators (``train_type.advantage``): group-relative (GRPO, Dr. GRPO), leave-one-out
(RLOO), REINFORCE++ and generalised advantage estimation (PPO).

References:
    Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
    Language Models" (GRPO, outcome supervision: rewards normalised within each group).
    Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective" (Dr. GRPO:
    no division by the group's std).
    Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
    from Human Feedback in LLMs" (RLOO).
    Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models".
    Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
    Estimation" (GAE).
"""

import torch
from torch import Tensor

from astrai.algorithms.masked import SumFn, local_sum, masked_var, masked_whiten

ADVANTAGE_SCALES = ("group", "batch", "none")


def group_advantages(
    rewards: Tensor, eps: float = 1e-6, scale: str = "group", sum_over_ranks: SumFn = local_sum
) -> Tensor:
    """GRPO advantages: each reward centred on its group's mean, then scaled.

    Args:
        rewards: ``[B, G]``, G sampled responses for each of B prompts.
        eps: added to the standard deviation before dividing.
        scale: ``group`` divides by the group's std (GRPO), ``batch`` by the std of every
            reward in the batch (over all ranks), ``none`` not at all (Dr. GRPO).
        sum_over_ranks: sums a tensor over the ranks (``scale="batch"`` only).

    Returns:
        ``[B, G]``, ``(r - mean_group) / (std + eps)`` with population stds (``correction=0``),
        or ``r - mean_group``. A group whose rewards are all equal gets exactly 0: it carries no
        learning signal, and ``r - mean`` alone may be off by rounding error.
    """
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; expected one of {ADVANTAGE_SCALES}")
    mean = rewards.mean(dim=-1, keepdim=True)
    if scale == "group":
        std = rewards.std(dim=-1, correction=0, keepdim=True)
        advantages = (rewards - mean) / (std + eps)
    elif scale == "batch":
        everything = torch.ones_like(rewards, dtype=torch.bool)
        std = masked_var(rewards, everything, sum_over_ranks).sqrt()
        advantages = (rewards - mean) / (std + eps)
    else:
        advantages = rewards - mean
    constant = (rewards == rewards[..., :1]).all(dim=-1, keepdim=True)
    return torch.where(constant, torch.zeros_like(advantages), advantages)


def rloo_advantages(rewards: Tensor) -> Tensor:
    """RLOO advantages: each reward minus the mean of the *other* rewards in its group.

    ``A_i = r_i - 1/(G-1) Σ_{j≠i} r_j = G/(G-1) (r_i - mean_group)``: an unbiased baseline,
    since ``r_i``'s own sample is not in it.

    Args:
        rewards: ``[B, G]`` with ``G >= 2``.

    Returns:
        ``[B, G]``; exactly 0 for a group whose rewards are all equal.
    """
    g = rewards.shape[-1]
    if g < 2:
        raise ValueError(f"RLOO needs at least 2 responses per prompt (got {g})")
    others = (rewards.sum(dim=-1, keepdim=True) - rewards) / (g - 1)
    advantages = rewards - others
    constant = (rewards == rewards[..., :1]).all(dim=-1, keepdim=True)
    return torch.where(constant, torch.zeros_like(advantages), advantages)


def reinforce_pp_advantages(
    token_rewards: Tensor, mask: Tensor, sum_over_ranks: SumFn = local_sum, eps: float = 1e-8
) -> Tensor:
    """REINFORCE++ advantages: undiscounted returns of the token rewards, whitened over the
    whole batch (every rank's tokens).

    ``G_t = Σ_{s >= t} r_s`` (γ = 1) over the valid tokens, then ``(G - mean) / sqrt(var + eps)``
    over every valid token of the batch: a global baseline instead of a critic or a group.

    Args:
        token_rewards: ``[..., R]`` per-token rewards (``rewards.token_rewards``: the score on
            the last token minus ``kl_coef`` × the per-token KL).
        mask: ``[..., R]`` bool, True = valid token (a prefix of each row).
        sum_over_ranks: sums a tensor over the ranks, for the batch's mean and variance.
        eps: added to the variance.

    Returns:
        ``[..., R]``, 0 at padding.
    """
    kept = torch.where(mask, token_rewards, torch.zeros_like(token_rewards))
    returns = kept.flip(-1).cumsum(-1).flip(-1)
    return masked_whiten(returns, mask, eps=eps, sum_over_ranks=sum_over_ranks)


def compute_gae(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the valid (trainable) tokens of each row.

    ``delta_t = r_t + gamma * V_{t'} - V_t`` and ``A_t = delta_t + gamma * lam * A_{t'}``, where
    ``t'`` is the next valid token after ``t``: masked positions are not time steps (a
    multi-turn episode's observation tokens between two turns neither decay nor reset the
    credit), and ``V`` and ``A`` after the last valid token are taken as 0 (the episode ended:
    terminal bootstrap 0). Masked positions are never read and are 0 in both outputs; a reward
    there is lost (place it on a valid token). With a prefix mask (a single-turn response) this
    is the textbook recursion, to the bit.

    Args:
        rewards: ``[..., R]`` per-token rewards.
        values: ``[..., R]`` critic values ``V_t``; pass them detached unless you want
            gradients through the targets.
        mask: ``[..., R]`` bool, True = a valid (trainable) token.
        gamma: discount factor in [0, 1].
        lam: GAE lambda in [0, 1].

    Returns:
        ``(advantages, returns)``, both ``[..., R]``; ``returns = advantages + values`` at valid
        positions, 0 elsewhere.
    """
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    values = torch.where(mask, values, zero)
    next_value = torch.zeros_like(values[..., 0])
    next_advantage = torch.zeros_like(values[..., 0])
    reversed_advantages = []
    for t in reversed(range(values.shape[-1])):
        valid = mask[..., t]
        delta = rewards[..., t] + gamma * next_value - values[..., t]
        advantage = torch.where(valid, delta + gamma * lam * next_advantage, zero)
        reversed_advantages.append(advantage)
        # a masked position passes the next valid token's value and advantage on unchanged
        next_value = torch.where(valid, values[..., t], next_value)
        next_advantage = torch.where(valid, advantage, next_advantage)
    advantages = torch.stack(reversed_advantages[::-1], dim=-1)
    # Both terms are already 0 at masked positions.
    return advantages, advantages + values
