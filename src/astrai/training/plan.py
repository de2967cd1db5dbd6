"""What the loop and the step read off the algorithm and the engine, decided once per run.

The run's batch shape is decided here: ``train_type.ppo_epochs`` and the passes
(``algorithms.pass_plan.PassPlan``: ``minibatches``, ``micro_batch_size``, ``score_tokens``,
``update_tokens``) are read from the config once; the strategy holds none of them (its
constructor never sees them: ``config.train_type_checks.strategy_node``) and receives the passes
in ``prepare``.

``train_type.max_policy_lag`` and the π_old source and correction it implies come from the lag
plan (``astrai.policy_lag.lag_plan``, the one reader of those keys), so the sampling thread, the
version check, the restored in-flight rollouts and the start banner all read one decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from astrai.algorithms.correction import Correction, correction_for
from astrai.algorithms.pass_plan import PassPlan
from astrai.algorithms.strategy import Strategy
from astrai.policy_lag import LagPlan, lag_plan
from astrai.rollout.engines.engine import engine_class


@dataclass(frozen=True)
class StepPlan:
    """Attributes:
    ppo_epochs: update epochs over each rollout (``train_type.ppo_epochs``).
    passes: how the update and the scoring passes cut the rollout: ``minibatches`` optimizer
        steps an epoch, their micro-batches, the memory budgets (``PassPlan``).
    updates_per_step: policy (and critic) optimizer steps per RL step,
        ``ppo_epochs × minibatches``: the policy versions one step adds.
    lag: the lag plan (``astrai.policy_lag.lag_plan``): ``max_policy_lag``, how many updates
        a step's rollout may trail the policy (0: sampled on the live policy just before its
        update; > 0: on a sampling thread, ``training.sampling.overlap``), and
        ``engine.old_logprobs`` / ``engine.correction`` as resolved for it (``auto`` chosen).
    correction: where π_old comes from: None for the engine's own logprobs (bypass).
    old_from_update: π_old is the update's own forward, detached (``Minibatch.old_logprobs``
        None), where a step makes one update (``ppo_epochs × minibatches`` = 1) and π_old is
        the trainer's (recomputed) or the live policy's (an engine that samples it): the same
        weights, so the first ratio is exactly 1 in any precision instead of 1 up to the
        roundings of two forward paths (bf16: ~1e-3). Bypass on an engine with its own weights
        keeps the engine's logprobs, the mismatch the user asked to clip against.
    """

    ppo_epochs: int
    passes: PassPlan
    updates_per_step: int
    correction: Correction | None
    old_from_update: bool
    lag: LagPlan

    @property
    def max_policy_lag(self) -> int:
        """The lag plan's ``max_policy_lag``."""
        return self.lag.max_policy_lag

    @property
    def old_logprobs(self) -> str:
        """The lag plan's ``engine.old_logprobs``, ``auto`` resolved."""
        return self.lag.old_logprobs

    def lag_facts(self) -> tuple[int, str, str] | None:
        """``(lag, old_logprobs, correction)`` for the start banner when rollouts lag."""
        if self.max_policy_lag == 0:
            return None
        return self.max_policy_lag, self.lag.old_logprobs, self.lag.correction


def step_plan(cfg: DictConfig, strategy: Strategy) -> StepPlan:
    """The plan of ``cfg``'s run, whose algorithm is ``strategy`` (the passes score at its
    sampling temperature and count a critic's trunk where it requires one)."""
    lag = lag_plan(cfg)
    tt = cfg.train_type
    passes = PassPlan(
        minibatches=tt.minibatches,
        micro_batch_size=tt.micro_batch_size,
        score_tokens=tt.score_tokens,
        update_tokens=tt.update_tokens,
        temperature=strategy.sampling.temperature,
        trains_critic="critic" in strategy.requires,
    )
    updates = tt.ppo_epochs * passes.minibatches
    same_weights = lag.recomputes or engine_class(cfg.get("engine")).samples_live_policy
    return StepPlan(
        ppo_epochs=tt.ppo_epochs,
        passes=passes,
        updates_per_step=updates,
        correction=correction_for(lag),
        old_from_update=updates == 1 and same_weights,
        lag=lag,
    )
