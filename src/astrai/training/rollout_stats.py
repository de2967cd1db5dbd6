"""Statistics of a prepared rollout for the logs, each reduced over the ranks once."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from astrai.algorithms.advantages import alike_groups
from astrai.algorithms.masked import masked_global_mean, masked_var
from astrai.distributed import all_reduce_sum
from astrai.rollout.rollout import Rollout, ended_with_eos


def rollout_metrics(
    rollout: Rollout,
    eos_id: int | Sequence[int],
    accuracy_threshold: float,
    reward_timeouts: float = 0.0,
) -> dict[str, float]:
    """Reward, accuracy, reward-term, length and advantage statistics of a prepared rollout,
    over all ranks in one reduction. ``rollout/accuracy``: the share of responses whose reward
    reaches ``accuracy_threshold``; ``reward/<name>``: each reward term's mean;
    ``rollout/truncated_frac``: the share cut at the length limit; ``rollout/frac_reward_zero_std``:
    the share of groups whose G rewards are all equal (TRL's name: no signal from those groups
    under a group baseline); ``rollout/reward_timeouts``: each rank's ``reward_timeouts`` (the
    responses whose reward did not return within ``reward.timeout_s``) summed. ``eos_id``: the
    id (or ``Tokenizer.stop_ids``) a response that ended on its own ends with.

    Decision: the reward statistics (reward mean and std, accuracy, the terms, the groups
    without signal) count the valid responses only (``Rollout.valid``): a failed episode's
    reward 0 is its environment's fault, which ``env/failed`` counts, not the policy's answer.
    The length and EOS shares count every response: its tokens were sampled all the same."""
    mask = rollout.response_mask
    lengths = mask.sum(-1).float()  # [B, G]
    solved = rollout.episode_stats.get("solved")  # an episode's own verdict, where it has one
    with_eos = ended_with_eos(rollout.response_ids, mask, eos_id)
    assert rollout.advantages is not None
    actions = rollout.valid_action_mask()
    rewards = rollout.rewards.double()
    valid = torch.ones_like(rewards, dtype=torch.bool) if rollout.valid is None else rollout.valid
    zero = torch.zeros((), dtype=torch.float64, device=rewards.device)

    def over_valid(x: torch.Tensor) -> torch.Tensor:  # [B, G] summed over the valid responses
        return torch.where(valid, x.double(), zero).sum()

    names = sorted(rollout.reward_terms)
    sums = all_reduce_sum(
        torch.stack(
            [
                over_valid(rewards),
                over_valid(rewards**2),
                lengths.double().sum(),
                with_eos.double().sum(),
                over_valid(rewards >= accuracy_threshold if solved is None else solved),
                *(over_valid(rollout.reward_terms[name]) for name in names),
                torch.tensor(float(reward_timeouts), dtype=torch.float64, device=rewards.device),
                valid.double().sum(),
                # the groups (rows of G) with no signal under a group baseline, and how many
                alike_groups(rewards, rollout.valid).double().sum(),
                torch.tensor(float(rewards.shape[0]), dtype=torch.float64, device=rewards.device),
                torch.tensor(float(rewards.numel()), dtype=torch.float64, device=rewards.device),
            ]
        ).cpu()
    )
    n, counted = sums[-1].clamp(min=1), sums[-4].clamp(min=1)
    reward_mean = sums[0] / counted
    return {
        "rollout/reward_mean": reward_mean.item(),
        "rollout/reward_std": (sums[1] / counted - reward_mean**2).clamp(min=0).sqrt().item(),
        "rollout/response_len": (sums[2] / n).item(),
        "rollout/eos_frac": (sums[3] / n).item(),
        "rollout/truncated_frac": (1 - sums[3] / n).item(),
        "rollout/frac_reward_zero_std": (sums[-3] / sums[-2].clamp(min=1)).item(),
        "rollout/accuracy": (sums[4] / counted).item(),
        **{f"reward/{name}": (sums[5 + i] / counted).item() for i, name in enumerate(names)},
        "rollout/reward_timeouts": sums[5 + len(names)].item(),
        "advantages/mean": masked_global_mean(rollout.advantages, actions, all_reduce_sum).item(),
        "advantages/std": masked_var(rollout.advantages, actions, all_reduce_sum).sqrt().item(),
        **(episode_metrics(rollout) if rollout.episode_stats else {}),
    }


def episode_metrics(rollout: Rollout) -> dict[str, float]:
    """``env/*`` of a rollout of episodes (``Rollout.episode_stats``), over all ranks in one
    reduction: each number's mean over the episodes (``env/step_s``: over the steps,
    ``env/turns_solved``: over the solved episodes), and
    ``rollout/observation_token_frac``: the share of the tokens after the prompts that are
    context (observations, separators)."""
    stats = rollout.episode_stats
    names = sorted(name for name in stats if name not in ("steps", "step_s"))
    after = rollout.response_mask.double().sum()
    sampled = rollout.action_mask().double().sum()
    sums = all_reduce_sum(
        torch.stack(
            [
                *(stats[name].double().sum() for name in names),
                stats["step_s"].double().sum(),
                stats["steps"].double().sum(),
                (stats["turns"] * stats["solved"]).double().sum(),
                stats["solved"].double().sum(),
                after - sampled,
                after,
                torch.tensor(
                    float(stats["turns"].numel()), dtype=torch.float64, device=after.device
                ),
            ]
        ).cpu()
    )
    n = sums[-1].clamp(min=1)
    means = {f"env/{name}": (sums[i] / n).item() for i, name in enumerate(names)}
    k = len(names)
    return {
        "env/tool_errors": 0.0,  # counted by the environments that report it
        **means,
        "env/step_s": (sums[k] / sums[k + 1].clamp(min=1)).item(),
        "env/turns_solved": (sums[k + 2] / sums[k + 3].clamp(min=1)).item(),
        "rollout/observation_token_frac": (sums[k + 4] / sums[k + 5].clamp(min=1)).item(),
    }


def rollout_samples(rollout: Rollout) -> list[tuple[str, str, float]]:
    """First response of each prompt as (prompt, response, reward)."""
    return [
        (prompt, group[0], float(rollout.rewards[b, 0]))
        for b, (prompt, group) in enumerate(zip(rollout.prompts, rollout.responses, strict=True))
    ]
