"""What rollouts that lag the policy require, decided in one place: where π_old comes from and
the mismatch correction, for an engine node whose ``old_logprobs``/``correction`` say ``auto``.

With ``train_type.max_policy_lag`` > 0 a step trains on samples an older policy drew, so the
trainer recomputes π_old itself and weights each token by π_old / π_behav, truncated
(``recompute`` + ``token_truncate``: decoupled PPO with truncated importance sampling, verl's and
AReaL's default); in step with the policy (lag 0, ``engine=torch``) π_old is the sampler's own
logprobs and there is nothing to correct (``bypass`` + ``none``), except in bf16 where a step
makes several updates: the sampler's cached decoding rounds otherwise than the update's forward
(SmolLM2-135M: the first minibatch's ``policy/approx_kl`` 4.7e-4 where it must be 0), so π_old
is recomputed through the update's forward (``recompute`` + ``none``: the first ratio exactly 1,
the mismatch logged). At one update a step the update's own forward is π_old
(``training.plan.StepPlan.old_from_update``) and nothing is recomputed. An explicit choice stays
the user's: one that contradicts the lag is refused by ``config.lag_checks`` in one line.

Below every reader (config checks, the metric contract, the trainer, the banner), standard
library only.
"""

from __future__ import annotations

from collections.abc import Mapping

AUTO = "auto"
LAGGING_CHOICES = ("recompute", "token_truncate")  # (old_logprobs, correction) at lag > 0
IN_STEP_CHOICES = ("bypass", "none")  # at lag 0


def updates_per_step(train_type: Mapping[str, object]) -> object:
    """``ppo_epochs × minibatches`` of a ``train_type`` node: the policy updates a step makes;
    1 where either is not an integer yet (validation refuses it by name)."""
    epochs, minibatches = train_type.get("ppo_epochs", 1), train_type.get("minibatches", 1)
    if isinstance(epochs, int) and isinstance(minibatches, int):
        return epochs * minibatches
    return 1


def engine_choices(
    engine: Mapping[str, object] | None,
    max_policy_lag: object,
    precision: object = "fp32",
    updates_per_step: object = 1,
) -> tuple[str, str]:
    """``(old_logprobs, correction)`` a run uses: the engine node's values, ``auto`` (or a
    missing key: ``engine=torch``'s default) resolved for ``max_policy_lag``, the run's
    ``infra.precision`` and its ``ppo_epochs × minibatches`` (``updates_per_step``). A
    correction left ``auto`` under an explicit ``old_logprobs=bypass`` is ``none`` (nothing to
    weight). A lag that is not a positive integer counts as 0 (validation refuses a bad one by
    name)."""
    node = engine or {}
    lag = max_policy_lag
    lagging = isinstance(lag, int) and not isinstance(lag, bool) and lag > 0
    several = isinstance(updates_per_step, int) and updates_per_step > 1
    old = str(node.get("old_logprobs", AUTO))
    if old == AUTO:
        recompute = lagging or (precision == "bf16" and several)
        old = LAGGING_CHOICES[0] if recompute else IN_STEP_CHOICES[0]
    correction = str(node.get("correction", AUTO))
    if correction == AUTO:
        correction = LAGGING_CHOICES[1] if lagging and old == "recompute" else IN_STEP_CHOICES[1]
    return old, correction
