"""DAPO's dynamic sampling (``train_type.filter_groups``): train only on groups that teach.

A group whose G rewards are all equal has zero advantage under every group baseline: it adds
sampling and update time, and only the KL term. Dynamic sampling drops such groups and samples
more prompts until the step has ``prompts_per_step`` informative groups, for at most
``max_resample_rounds`` extra rounds (Yu et al. 2025, "DAPO", §3.2). If the rounds run out, the
remaining places are filled with dropped groups, so a step always has the configured shape
(verl raises instead; a run that starts at zero accuracy would stop on its first step).

In a data-parallel run every rank fills its own share; the ranks agree on the number of rounds
(one small collective per round), so sampling stays in lockstep where the model is sharded.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from astrai.algorithms.masked import SumFn, local_sum
from astrai.rollout.rollout import Rollout, cat_rollouts

# Extra rounds draw prompts from the training stream of another seed: seed + round × stride
# (a stride no seed sweep reaches), so they never repeat this step's own prompts.
RESAMPLE_SEED_STRIDE = 1_000_003


def informative_groups(rewards: Tensor) -> Tensor:
    """``[B, G]`` rewards -> ``[B]`` bool: True where the group's rewards are not all equal."""
    return (rewards != rewards[..., :1]).any(dim=-1)


def sample_informative(
    sample: Callable[[int], Rollout],
    needed: int,
    max_rounds: int,
    pad_id: int,
    sum_over_ranks: SumFn = local_sum,
) -> tuple[Rollout, dict[str, float]]:
    """Sample rounds until ``needed`` informative groups are in hand (on every rank).

    Args:
        sample: round -> this rank's freshly sampled rollout (round 0: the step's own prompts).
        needed: groups this rank must return.
        max_rounds: extra rounds at most after round 0.
        pad_id: the tokenizer's padding id (rounds' rollouts have different widths).
        sum_over_ranks: sums a tensor over the ranks.

    Returns:
        ``(rollout, metrics)``: ``needed`` groups, informative ones first in sampling order, then
        dropped ones if the rounds ran out; ``rollout/filtered_groups`` (groups with all-equal
        rewards sampled this step, every rank) and ``rollout/resample_rounds`` (extra rounds).
    """
    kept: list[Rollout] = []
    dropped: list[Rollout] = []
    have = filtered = rounds = 0
    for round_index in range(max_rounds + 1):
        rollout = sample(round_index)
        informative = informative_groups(rollout.rewards).tolist()
        kept.append(rollout.take([i for i, ok in enumerate(informative) if ok]))
        dropped.append(rollout.take([i for i, ok in enumerate(informative) if not ok]))
        have += sum(informative)
        filtered += len(informative) - sum(informative)
        rounds = round_index
        short = torch.tensor([float(have < needed)], dtype=torch.float64)
        if sum_over_ranks(short).item() == 0:  # every rank has enough
            break
    everything = cat_rollouts([*kept, *dropped], pad_id)
    batch = everything.take(range(needed))
    total_filtered = sum_over_ranks(torch.tensor([float(filtered)], dtype=torch.float64))
    return batch, {
        "rollout/filtered_groups": total_filtered.item(),
        "rollout/resample_rounds": float(rounds),
    }
