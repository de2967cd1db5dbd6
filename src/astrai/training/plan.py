"""What the loop and the step read off the algorithm and the engine, decided once per run.

``train_type.max_policy_lag`` lives here: read from the config by ``step_plan`` alone (no
algorithm uses it), with the π_old source and correction it implies (``astrai.policy_lag``:
``auto`` resolved for the lag), so the sampling thread, the version check, the restored
in-flight rollouts and the start banner all read one decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from astrai.algorithms.correction import Correction, correction_from_config
from astrai.algorithms.strategy import Strategy
from astrai.policy_lag import engine_choices


@dataclass(frozen=True)
class StepPlan:
    """Attributes:
    updates_per_step: policy (and critic) optimizer steps per RL step,
        ``ppo_epochs × minibatches``: the policy versions one step adds.
    max_policy_lag: how many updates a step's rollout may trail the policy (0: sampled on the
        live policy just before its update; > 0: on a sampling thread, ``training.overlap``).
    old_logprobs, correction_name: ``engine.old_logprobs`` and ``engine.correction`` as
        resolved for the lag (``auto`` chosen).
    correction: where π_old comes from: None for the engine's own logprobs (bypass).
    """

    updates_per_step: int
    max_policy_lag: int
    old_logprobs: str
    correction_name: str
    correction: Correction | None

    def lag_facts(self) -> tuple[int, str, str] | None:
        """``(lag, old_logprobs, correction)`` for the start banner when rollouts lag."""
        if self.max_policy_lag == 0:
            return None
        return self.max_policy_lag, self.old_logprobs, self.correction_name


def step_plan(cfg: DictConfig, strategy: Strategy) -> StepPlan:
    """The plan of ``cfg``'s run, whose algorithm is ``strategy``."""
    lag = int(cfg.train_type.max_policy_lag)
    engine = cfg.get("engine")
    old_logprobs, correction = engine_choices(engine, lag)
    return StepPlan(
        updates_per_step=strategy.ppo_epochs * strategy.minibatches,
        max_policy_lag=lag,
        old_logprobs=old_logprobs,
        correction_name=correction,
        correction=correction_from_config(engine, lag),
    )
