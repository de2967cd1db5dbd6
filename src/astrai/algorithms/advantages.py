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


def alike_groups(rewards: Tensor, valid: Tensor | None = None) -> Tensor:
    """Whether each group carries no signal for a group baseline.

    Args:
        rewards: ``[B, G]``.
        valid: ``[B, G]`` bool, True = the member counts (``Rollout.valid``); None = all do.

    Returns:
        ``[B]`` bool: True where the valid members' rewards are all equal, or fewer than two
        members are valid (there is nothing to compare a response with).
    """
    members = _members(rewards, valid)
    highest = torch.where(members, rewards, -torch.inf).amax(dim=-1)
    lowest = torch.where(members, rewards, torch.inf).amin(dim=-1)
    return (highest == lowest) | (members.sum(dim=-1) < 2)


def _members(rewards: Tensor, valid: Tensor | None) -> Tensor:
    """``[B, G]`` bool: ``valid``, or every member when it is None."""
    return torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid


def _filled(rewards: Tensor, members: Tensor) -> Tensor:
    """``[B, G]`` rewards with each invalid member replaced by its group's valid mean.

    A filled member adds nothing to its group's deviations, so the group's plain mean and
    population std of the filled row are its valid members' (the std times
    ``sqrt(n_valid / G)``), and a group that is all valid takes exactly the unmasked
    operations: ``valid=None`` and an all-True ``valid`` give the same bits.
    """
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    count = members.sum(dim=-1, keepdim=True).clamp(min=1)
    valid_mean = torch.where(members, rewards, zero).sum(dim=-1, keepdim=True) / count
    return torch.where(members, rewards, valid_mean)


def group_advantages(
    rewards: Tensor,
    eps: float = 1e-6,
    scale: str = "group",
    sum_over_ranks: SumFn = local_sum,
    valid: Tensor | None = None,
) -> Tensor:
    """GRPO advantages: each reward centred on its group's mean, then scaled.

    Args:
        rewards: ``[B, G]``, G sampled responses for each of B prompts.
        eps: added to the standard deviation before dividing.
        scale: ``group`` divides by the group's std (GRPO), ``batch`` by the std of every
            reward in the batch (over all ranks), ``none`` not at all (Dr. GRPO).
        sum_over_ranks: sums a tensor over the ranks (``scale="batch"`` only).
        valid: ``[B, G]`` bool, True = the member counts in the statistics (a failed episode
            does not: ``Rollout.valid``); None = all do.

    Returns:
        ``[B, G]``, ``(r - mean_group) / (std + eps)`` with population stds (``correction=0``),
        or ``r - mean_group``, the means and stds over the valid members (the batch's std over
        every rank's valid rewards). A group whose valid rewards are all equal, or that has
        fewer than two valid members, gets exactly 0: it carries no learning signal, and
        ``r - mean`` alone may be off by rounding error. An invalid member gets 0.
    """
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; expected one of {ADVANTAGE_SCALES}")
    members = _members(rewards, valid)
    filled = _filled(rewards, members)
    mean = filled.mean(dim=-1, keepdim=True)
    if scale == "group":
        # the filled row's std is the valid members' times sqrt(n_valid / G) (``_filled``)
        share = rewards.shape[-1] / members.sum(dim=-1, keepdim=True).clamp(min=1)
        std = filled.std(dim=-1, correction=0, keepdim=True) * share.sqrt()
        advantages = (filled - mean) / (std + eps)
    elif scale == "batch":
        std = masked_var(rewards, members, sum_over_ranks).sqrt()
        advantages = (filled - mean) / (std + eps)
    else:
        advantages = filled - mean
    silent = alike_groups(rewards, valid)[..., None] | ~members
    return torch.where(silent, torch.zeros_like(advantages), advantages)


def rloo_advantages(rewards: Tensor, valid: Tensor | None = None) -> Tensor:
    """RLOO advantages: each reward minus the mean of the *other* valid rewards in its group.

    ``A_i = r_i - 1/(n-1) Σ_{j≠i, valid} r_j`` over the group's n valid members: an unbiased
    baseline, since ``r_i``'s own sample is not in it.

    Args:
        rewards: ``[B, G]`` with ``G >= 2``.
        valid: ``[B, G]`` bool, True = the member counts (``Rollout.valid``); None = all do.

    Returns:
        ``[B, G]``; exactly 0 for a group whose valid rewards are all equal or that has fewer
        than two valid members, and for an invalid member.
    """
    g = rewards.shape[-1]
    if g < 2:
        raise ValueError(f"RLOO needs at least 2 responses per prompt (got {g})")
    members = _members(rewards, valid)
    kept = torch.where(members, rewards, torch.zeros_like(rewards))
    # a group with one valid member divides by 0 here: zeroed below
    others = (kept.sum(dim=-1, keepdim=True) - kept) / (members.sum(dim=-1, keepdim=True) - 1)
    advantages = kept - others
    silent = alike_groups(rewards, valid)[..., None] | ~members
    return torch.where(silent, torch.zeros_like(advantages), advantages)


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
        mask: ``[..., R]`` bool, True = valid token (the sampled tokens of the responses
            that count: ``Rollout.valid_action_mask``; an invalid response's row is all False
            and gets 0).
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
