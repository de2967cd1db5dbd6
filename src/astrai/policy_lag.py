"""What rollouts that lag the policy require, decided in one place: the lag settings read from a
config (``lag_plan``, their one reader) and what ``auto`` chooses for π_old and the correction.

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

Validation writes the plan's choices in place of ``auto`` (``config.lag_checks.record_lag_plan``),
so the saved ``config.yaml`` records what ran; resolving such a config again gives the same plan.

Below every reader (config checks, the metric contract, the trainer, the banner), standard
library only: a config is read as a ``Mapping`` (an OmegaConf ``DictConfig`` is one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

AUTO = "auto"
LAGGING_CHOICES = ("recompute", "token_truncate")  # (old_logprobs, correction) at lag > 0
IN_STEP_CHOICES = ("bypass", "none")  # at lag 0
# the keys only this module reads from a config (``tests/test_lag_resolver.py``)
LAG_KEYS = ("max_policy_lag", "old_logprobs", "correction", "correction_low", "correction_high")


@dataclass(frozen=True)
class LagSettings:
    """The lag keys as the config holds them (``auto``, an explicit choice, or a bad value that
    validation names): ``train_type.max_policy_lag`` and ``engine.old_logprobs``,
    ``engine.correction``, ``engine.correction_low`` / ``_high``."""

    max_policy_lag: object = 0
    old_logprobs: object = AUTO
    correction: object = AUTO
    correction_low: object = None
    correction_high: object = None


@dataclass(frozen=True)
class LagPlan:
    """A run's lag plan (``lag_plan``).

    Attributes:
        max_policy_lag: how many updates a step's rollout may trail the policy; 0 where the
            setting is not a positive integer (validation refuses a bad one by name).
        updates_per_step: ``ppo_epochs × minibatches`` (1 where either is not an integer yet).
        old_logprobs, correction: where π_old comes from and the mismatch correction, ``auto``
            resolved; a correction left ``auto`` under an explicit ``bypass`` is ``none``.
        correction_low, correction_high: the correction's band (None: the mode's published one,
            ``algorithms.correction.DEFAULT_BOUNDS``).
        configured: the settings as written, for the checks' messages.
    """

    max_policy_lag: int
    updates_per_step: int
    old_logprobs: str
    correction: str
    correction_low: float | None
    correction_high: float | None
    configured: LagSettings

    @property
    def recomputes(self) -> bool:
        """Whether the trainer recomputes π_old (and logs the mismatch metrics)."""
        return self.old_logprobs == "recompute"


def configured_lag(train_type: Mapping[str, object]) -> object:
    """``train_type.max_policy_lag`` as written (0 where the node has none)."""
    return train_type.get("max_policy_lag", 0)


def updates_per_step(train_type: Mapping[str, object]) -> object:
    """``ppo_epochs × minibatches`` of a ``train_type`` node: the policy updates a step makes;
    1 where either is not an integer yet (validation refuses it by name)."""
    epochs, minibatches = train_type.get("ppo_epochs", 1), train_type.get("minibatches", 1)
    if isinstance(epochs, int) and isinstance(minibatches, int):
        return epochs * minibatches
    return 1


def lag_plan(cfg: Mapping[str, object]) -> LagPlan:
    """The lag plan of a composed config (``train_type``, ``engine``, ``infra.precision``): a
    missing node or key reads as ``engine=torch``'s defaults, lag 0, fp32."""
    train_type = _node(cfg, "train_type")
    engine = _node(cfg, "engine")
    settings = LagSettings(
        max_policy_lag=configured_lag(train_type),
        old_logprobs=engine.get("old_logprobs", AUTO),
        correction=engine.get("correction", AUTO),
        correction_low=engine.get("correction_low"),
        correction_high=engine.get("correction_high"),
    )
    updates = updates_per_step(train_type)
    precision = _node(cfg, "infra").get("precision", "fp32")
    lag = settings.max_policy_lag
    steps = lag if isinstance(lag, int) and not isinstance(lag, bool) and lag > 0 else 0
    old_logprobs, correction = resolve_choices(settings, steps > 0, precision, updates)
    return LagPlan(
        max_policy_lag=steps,
        updates_per_step=updates if isinstance(updates, int) else 1,
        old_logprobs=old_logprobs,
        correction=correction,
        correction_low=_band(settings.correction_low),
        correction_high=_band(settings.correction_high),
        configured=settings,
    )


def resolve_choices(
    settings: LagSettings, lagging: bool, precision: object, updates: object
) -> tuple[str, str]:
    """``(old_logprobs, correction)``: the settings' own, ``auto`` chosen for a run that lags
    the policy (``lagging``) or not, in ``precision``, making ``updates`` updates a step."""
    several = isinstance(updates, int) and updates > 1
    old = str(settings.old_logprobs)
    if old == AUTO:
        recompute = lagging or (precision == "bf16" and several)
        old = LAGGING_CHOICES[0] if recompute else IN_STEP_CHOICES[0]
    correction = str(settings.correction)
    if correction == AUTO:
        correction = LAGGING_CHOICES[1] if lagging and old == "recompute" else IN_STEP_CHOICES[1]
    return old, correction


def _node(cfg: Mapping[str, object], key: str) -> Mapping[str, object]:
    node = cfg.get(key)
    return node if isinstance(node, Mapping) else {}


def _band(value: object) -> float | None:
    """A band edge as a float (None stays None; a bad value is ``engine_checks``' to name)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None
