"""Statistics of a prepared rollout for the logs, each reduced over the ranks once."""

from __future__ import annotations

import torch

from astrai.algorithms.masked import masked_global_mean, masked_var
from astrai.distributed import all_reduce_sum
from astrai.rollout.rollout import Rollout


def rollout_metrics(rollout: Rollout, eos_id: int) -> dict[str, float]:
    """Reward, length and advantage statistics of a prepared rollout (over all ranks)."""
    mask = rollout.response_mask
    lengths = mask.sum(-1).float()  # [B, G]
    last = (lengths - 1).clamp_min(0).long()[..., None]
    ended_with_eos = rollout.response_ids.gather(-1, last).squeeze(-1)
    assert rollout.advantages is not None
    rewards = rollout.rewards.double()
    sums = all_reduce_sum(
        torch.stack(
            [
                rewards.sum(),
                (rewards**2).sum(),
                lengths.double().sum(),
                (ended_with_eos == eos_id).double().sum(),
                torch.tensor(float(rewards.numel()), dtype=torch.float64, device=rewards.device),
            ]
        ).cpu()
    )
    n = sums[4].clamp(min=1)
    reward_mean = sums[0] / n
    return {
        "rollout/reward_mean": reward_mean.item(),
        "rollout/reward_std": (sums[1] / n - reward_mean**2).clamp(min=0).sqrt().item(),
        "rollout/response_len": (sums[2] / n).item(),
        "rollout/eos_frac": (sums[3] / n).item(),
        "advantages/mean": masked_global_mean(rollout.advantages, mask, all_reduce_sum).item(),
        "advantages/std": masked_var(rollout.advantages, mask, all_reduce_sum).sqrt().item(),
    }


def rollout_accuracy(rollout: Rollout, threshold: float) -> float:
    """Share of sampled responses whose reward reaches ``threshold`` (over all ranks)."""
    rewards = rollout.rewards
    correct = (rewards >= threshold).sum().double()
    counts = all_reduce_sum(torch.stack([correct, correct.new_tensor(rewards.numel())]).cpu())
    return (counts[0] / counts[1].clamp(min=1)).item()


def reward_term_metrics(rollout: Rollout) -> dict[str, float]:
    """``reward/<name>``: each reward term's mean over the sampled responses (all ranks)."""
    if not rollout.reward_terms:
        return {}
    names = sorted(rollout.reward_terms)
    scores = [rollout.reward_terms[name].double() for name in names]
    count = scores[0].new_tensor(scores[0].numel())
    sums = all_reduce_sum(torch.stack([*(s.sum() for s in scores), count]).cpu())
    return {
        f"reward/{name}": (sums[i] / sums[-1].clamp(min=1)).item() for i, name in enumerate(names)
    }


def rollout_samples(rollout: Rollout) -> list[tuple[str, str, float]]:
    """First response of each prompt as (prompt, response, reward)."""
    return [
        (prompt, group[0], float(rollout.rewards[b, 0]))
        for b, (prompt, group) in enumerate(zip(rollout.prompts, rollout.responses, strict=True))
    ]
