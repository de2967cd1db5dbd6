"""Noticing a run that cannot learn: steps whose rewards carry no signal, said once in words.

Under a group baseline (GRPO, Dr. GRPO, RLOO) a group whose G rewards are all equal has
advantage 0 for every response, so when every group is like that the update has no gradient
from the reward at all (TRL logs the share as ``frac_reward_zero_std``). Under a batch baseline
(PPO's critic, REINFORCE++) the reward says nothing when every reward of the batch is equal:
the advantages are then the critic's error or the KL alone. The usual cause with a pretrained
chat model is a response limit shorter than its answers: every response is cut at
``max_new_tokens`` and scores the same. A run like that used to finish with ``done:`` and exit
0; ``SignalWatch`` warns after a few such steps in a row, once, and again only if the signal
comes back and is lost again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

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
    highest = max_over_ranks(float(rewards.max()))
    lowest = -max_over_ranks(-float(rewards.min()))
    return highest == lowest


class SignalWatch:
    """Counts the consecutive steps with no learning signal from the reward and warns (rank 0)
    when they reach ``patience``.

    Args:
        group_baseline: the advantages subtract each group's own baseline (``GROUP_BASELINES``):
            no signal = every group's rewards are equal; else every reward of the batch.
        max_new_tokens: the response limit, named in the warning.
        enabled: whether this process logs (rank 0); every rank counts alike.
        patience: consecutive steps before the warning.
    """

    def __init__(
        self,
        group_baseline: bool,
        max_new_tokens: int,
        enabled: bool = True,
        patience: int = PATIENCE,
    ) -> None:
        self.group_baseline = group_baseline
        self.max_new_tokens = max_new_tokens
        self.enabled = enabled
        self.patience = patience
        self.quiet_steps = 0  # consecutive steps without signal, up to the last observed

    def observe(
        self,
        step: int,
        rollout: Rollout,
        metrics: Mapping[str, float],
        max_over_ranks: MaxFn,
    ) -> str | None:
        """Count step ``step`` (its ``rollout`` and its ``rollout_metrics``, global over the
        ranks); returns (and logs, when ``enabled``) the warning on the step that reaches
        ``patience``, else None. Every rank must call this (a batch baseline reduces)."""
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
