"""DAPO's dynamic sampling (``train_type.filter_groups``): train only on groups that teach.

A group whose G rewards are all equal has zero advantage under every group baseline: it adds
sampling and update time, and only the KL term. Only the valid members count (``Rollout.valid``:
a failed episode's reward 0 is the fault's): a group is judged on them, and one with fewer than
two has no signal either. Dynamic sampling drops such groups and samples more prompts until
the step has ``prompts_per_step`` informative groups, for at most
``max_resample_rounds`` extra rounds (Yu et al. 2025, "DAPO", §3.2). If the rounds run out, the
remaining places are filled with dropped groups, so a step always has the configured shape
(verl raises instead; a run that starts at zero accuracy would stop on its first step).

An extra round samples prompts that no earlier round of this step used (a prompt whose group was
all-equal once would likely be again): it draws further batches of the task's training stream
and keeps the unseen ones (``draw_unseen``). A task with fewer unseen prompts left than a round
holds (a small dataset; 1-digit addition has 87 training prompts) gives a smaller round, and one
with none left ends the rounds early, with a warning: a prompt is never sampled twice in a step's
extra rounds.

In a data-parallel run every rank fills its own share; each round's prompts are drawn whole, the
same on every rank, before they are split by rank, and the ranks agree on the number of rounds
(one small collective per round), so sampling stays in lockstep where the model is sharded.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Hashable, Iterator

import torch
from torch import Tensor

from astrai.algorithms.advantages import alike_groups
from astrai.algorithms.masked import SumFn, local_sum
from astrai.rollout.rollout import Rollout, cat_rollouts
from astrai.tasks.base import Problem

# The step's k-th draw of prompts reads the training stream of seed + k × stride (k = 0: the
# step's own batch), a stride no seed sweep reaches: the streams are independent.
RESAMPLE_SEED_STRIDE = 1_000_003
# Draws one extra round may take to fill up with unseen prompts; past that the task is taken to
# have no more. A draw of n of S rows holds a given row with probability about n/S, so at the
# last few unseen rows of a dataset 8 draws of a round's size find most, not always all.
MAX_DRAWS_PER_ROUND = 8

POOL_EXHAUSTED = (
    "dynamic sampling: the task has fewer unseen training prompts left than an extra round "
    "holds; its rounds shrink or end early instead of repeating this step's prompts"
)


def prompt_key(problem: Problem) -> Hashable:
    """What makes two prompts the same: the string, or every chat turn's role and content."""
    if isinstance(problem.prompt, str):
        return problem.prompt
    return tuple(tuple(sorted(turn.items())) for turn in problem.prompt)


def draw_unseen(
    draw: Callable[[int], list[Problem]],
    draws: Iterator[int],
    size: int,
    seen: set[Hashable],
    multiple_of: int = 1,
    max_draws: int = MAX_DRAWS_PER_ROUND,
) -> list[Problem]:
    """One extra round's prompts: up to ``size`` problems whose prompts ``seen`` does not hold.

    Args:
        draw: draw index -> a batch of the task's training stream (every rank's prompts).
        draws: the draw indices still unused this step, taken in order.
        size: prompts a full round holds.
        seen: keys (``prompt_key``) of the prompts this step sampled so far; the round's are
            added.
        multiple_of: the round's length is a multiple of this (the ranks split it evenly).
        max_draws: draws at most; the unseen prompts they hold make the round.

    Returns:
        The new prompts in draw order, distinct; fewer than ``size`` (``[]`` when none) when
        the task has no more unseen prompts within ``max_draws`` draws.
    """
    fresh: dict[Hashable, Problem] = {}  # insertion-ordered
    for _ in range(max_draws):
        for problem in draw(next(draws)):
            key = prompt_key(problem)
            if key not in seen and key not in fresh:
                fresh[key] = problem
            if len(fresh) == size:
                break
        if len(fresh) == size:
            break
    keep = len(fresh) - len(fresh) % multiple_of
    keys = list(fresh)[:keep]
    seen.update(keys)
    return [fresh[key] for key in keys]


class StepPrompts:
    """A step's prompts round by round: round 0 is the step's own batch as the task gives it,
    every later round prompts none of the earlier rounds used (``draw_unseen``).

    Args:
        draw: draw index -> a batch of the task's training stream (every rank's prompts);
            ``draw(0)`` is the step's own.
        size: prompts a full round holds.
        multiple_of: a round's length is a multiple of this (the number of ranks).
    """

    def __init__(self, draw: Callable[[int], list[Problem]], size: int, multiple_of: int) -> None:
        self.draw = draw
        self.size = size
        self.multiple_of = multiple_of
        self.seen: set[Hashable] = set()
        self.draws = itertools.count()
        self.rounds = 0

    def next_round(self) -> list[Problem]:
        """The next round's prompts, every rank's; ``[]`` when the task has no unseen one left."""
        self.rounds += 1
        if self.rounds == 1:  # the step's own batch, as the task gives it (repeats and all)
            problems = self.draw(next(self.draws))
            self.seen.update(map(prompt_key, problems))
            return problems
        problems = draw_unseen(self.draw, self.draws, self.size, self.seen, self.multiple_of)
        if len(problems) < self.size:
            warnings.warn(POOL_EXHAUSTED, stacklevel=2)
        return problems


def informative_groups(rewards: Tensor, valid: Tensor | None = None) -> Tensor:
    """``[B, G]`` rewards -> ``[B]`` bool: True where the group's valid rewards (``valid``:
    ``Rollout.valid``, None = all) are not all equal: a failed episode's reward 0 is the
    fault's, so it makes no group informative (``algorithms.advantages.alike_groups``)."""
    return ~alike_groups(rewards, valid)


def sample_informative(
    sample: Callable[[list[Problem]], Rollout],
    draw: Callable[[int], list[Problem]],
    needed: int,
    max_rounds: int,
    pad_id: int,
    sum_over_ranks: SumFn = local_sum,
    ranks: int = 1,
) -> tuple[Rollout, dict[str, float]]:
    """Sample rounds until ``needed`` informative groups are in hand (on every rank).

    Args:
        sample: a round's prompts (every rank's) -> this rank's share, sampled and scored.
        draw: draw index -> a batch of ``needed × ranks`` prompts of the task's training
            stream (``draw(0)``: the step's own prompts; ``StepPrompts``).
        needed: groups this rank must return.
        max_rounds: extra rounds at most after round 0.
        pad_id: the tokenizer's padding id (rounds' rollouts have different widths).
        sum_over_ranks: sums a tensor over the ranks.
        ranks: the number of ranks (a round's prompts divide evenly among them).

    Returns:
        ``(rollout, metrics)``: ``needed`` groups, informative ones first in sampling order, then
        dropped ones if the rounds ran out; ``rollout/filtered_groups`` (groups with all-equal
        valid rewards sampled this step, every rank) and ``rollout/resample_rounds`` (extra
        rounds).
    """
    prompts = StepPrompts(draw, needed * ranks, ranks)
    kept: list[Rollout] = []
    dropped: list[Rollout] = []
    have = filtered = rounds = 0
    for round_index in range(max_rounds + 1):
        problems = prompts.next_round()
        if not problems:  # no unseen prompt left: the same list, so the same round, on every rank
            break
        rollout = sample(problems)
        informative = informative_groups(rollout.rewards, rollout.valid).tolist()
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
