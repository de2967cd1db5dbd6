"""Noticing a run that cannot learn: steps whose rewards carry no signal, said once in words.

Under a group baseline (GRPO, Dr. GRPO, RLOO) a group whose G rewards are all equal has
advantage 0 for every response, so when every group is like that the update has no gradient
from the reward at all (TRL logs the share as ``frac_reward_zero_std``). Under a batch baseline
(PPO's critic, REINFORCE++) the reward says nothing when every reward of the batch is equal:
the advantages are then the critic's error or the KL alone. The usual cause with a pretrained
chat model is a response limit shorter than its answers: every response is cut at
``max_new_tokens`` and scores the same. A run like that used to finish with ``done:`` and exit
0; ``RewardSignalWatch`` warns after a few such steps in a row, once, and again only if the signal
comes back and is lost again.

Under an environment (``env=...``), a step whose every episode failed (``env/failed`` 1.0: the
environment hung, raised or returned what it cannot) trains on nothing; after ``PATIENCE`` such
steps in a row the environment is broken, not unlucky, and ``observe`` raises
``EnvironmentFailing``: the run stops with one line naming the causes (``env/failed_<cause>``),
its last checkpoint intact. Like the quiet-step count, the failing-step count starts again at a
resume.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from astrai.rollout.episodes.calls import FAILURE_CAUSES, EnvironmentFailing
from astrai.rollout.rollout import Rollout

log = logging.getLogger("astrai.training.trainer")  # the trainer's lines, one logger name

# consecutive steps without signal before the warning (the acceptance: "within 3 steps")
PATIENCE = 3
# the advantages that subtract a baseline of the response's own group
GROUP_BASELINES = frozenset({"grpo", "dr_grpo", "rloo"})
# the share of truncated responses from which the warning blames the length limit
TRUNCATION_BLAME = 0.5
MAX_NEW_TOKENS_KEY = "train_type.sampling.max_new_tokens"

MaxFn = Callable[[float], float]


def rewards_all_equal(rollout: Rollout, max_over_ranks: MaxFn) -> bool:
    """Whether every reward of the whole batch (every rank's) is the same value; every rank must
    call this (two scalar reductions)."""
    rewards = rollout.rewards.double()
    valid = getattr(rollout, "valid", None)
    if valid is not None:  # a failed episode's 0 says nothing about the reward
        rewards = rewards[valid]
    # a rank without a valid response agrees with any value: -inf to the max, +inf to the min
    empty = rewards.numel() == 0
    highest = max_over_ranks(float("-inf") if empty else float(rewards.max()))
    lowest = -max_over_ranks(float("-inf") if empty else -float(rewards.min()))
    return highest == lowest


class RewardSignalWatch:
    """Counts the consecutive steps with no learning signal from the reward and warns (rank 0)
    when they reach ``patience``.

    Args:
        group_baseline: the advantages subtract each group's own baseline (``GROUP_BASELINES``):
            no signal = every group's rewards are equal; else every reward of the batch.
        max_new_tokens: the response limit, named in the warning.
        enabled: whether this process logs (rank 0); every rank counts alike.
        patience: consecutive steps before the warning.
        watch_reward: whether the reward is the run's only signal; False under distillation
            (``distill=opd``: the teacher's per-token signal moves the policy whatever the
            rewards), where only failing episodes are counted.
    """

    def __init__(
        self,
        group_baseline: bool,
        max_new_tokens: int,
        enabled: bool = True,
        patience: int = PATIENCE,
        watch_reward: bool = True,
    ) -> None:
        self.watch_reward = watch_reward
        self.group_baseline = group_baseline
        self.max_new_tokens = max_new_tokens
        self.enabled = enabled
        self.patience = patience
        self.quiet_steps = 0  # consecutive steps without signal, up to the last observed
        self.failing_steps = 0  # consecutive steps whose every episode failed

    def observe(
        self,
        step: int,
        rollout: Rollout,
        metrics: Mapping[str, float],
        max_over_ranks: MaxFn,
    ) -> str | None:
        """Count step ``step`` (its ``rollout`` and its ``rollout_metrics``, global over the
        ranks); returns (and logs, when ``enabled``) the warning on the step that reaches
        ``patience``, else None. Every rank must call this (a batch baseline reduces).
        Raises ``EnvironmentFailing`` at the ``patience``-th step in a row whose every episode
        failed."""
        self._count_failures(step, metrics)
        if not self.watch_reward:
            return None
        if self.group_baseline:
            silent = metrics["rollout/frac_reward_zero_std"] == 1.0
        else:
            silent = rewards_all_equal(rollout, max_over_ranks)
        self.quiet_steps = self.quiet_steps + 1 if silent else 0
        if self.quiet_steps != self.patience:
            return None
        message = no_signal_message(
            step, self.patience, self.group_baseline, self.max_new_tokens, metrics
        )
        if self.enabled:
            log.warning("%s", message)
        return message

    def _count_failures(self, step: int, metrics: Mapping[str, float]) -> None:
        """Count a step whose every episode failed; raise at the ``patience``-th in a row."""
        failed = metrics.get("env/failed")
        if failed is None:  # one-turn rollouts: nothing to count
            return
        self.failing_steps = self.failing_steps + 1 if failed >= 1.0 else 0
        if self.failing_steps < self.patience:
            return
        causes = ", ".join(
            f"{cause} {share:.0%}"
            for cause in FAILURE_CAUSES
            if (share := metrics.get(f"env/failed_{cause}", 0.0)) > 0
        )
        raise EnvironmentFailing(
            f"every episode failed in steps {step - self.failing_steps + 1}-{step} "
            f"({causes or 'no cause recorded'}): the environment cannot run; the first failure "
            "of each cause is logged above"
        )


def no_signal_message(
    step: int,
    steps: int,
    group_baseline: bool,
    max_new_tokens: int,
    metrics: Mapping[str, float],
) -> str:
    """The warning's text: what was seen over the last ``steps`` steps up to ``step``, what it
    means, and what to try (the length limit first when most responses were cut at it)."""
    first = step - steps + 1
    # every reward the same value: say which (a constant 0 reads differently from a constant 1)
    value = ""
    if metrics.get("rollout/reward_std", 1.0) == 0.0:
        value = f", all {metrics['rollout/reward_mean']:g}"
    if group_baseline:
        seen = f"every group's rewards were equal{value} (rollout/frac_reward_zero_std 1.0)"
        meaning = "every advantage is 0: the update has no gradient from the reward"
    else:
        seen = f"every reward of the batch was equal{value}"
        meaning = "the advantages hold nothing from the reward (only the critic's error, the KL)"
    truncated = metrics.get("rollout/truncated_frac", 0.0)
    if truncated >= 1.0:
        hint = (
            f"every response was cut at max_new_tokens={max_new_tokens} "
            f"(rollout/truncated_frac 1.0): raise {MAX_NEW_TOKENS_KEY}"
        )
    elif truncated >= TRUNCATION_BLAME:
        hint = (
            f"{truncated:.0%} of the responses were cut at max_new_tokens={max_new_tokens} "
            f"(rollout/truncated_frac): raise {MAX_NEW_TOKENS_KEY}"
        )
    else:
        hint = (
            "check that the reward can tell these responses apart (samples/rollout in "
            "TensorBoard), e.g. a reward with partial credit"
        )
    return (
        f"no learning signal from the reward in steps {first}-{step}: {seen}, so {meaning}; {hint}"
    )
