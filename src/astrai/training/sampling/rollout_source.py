"""Step 1 of the loop, sampling: where each step's rollout comes from (``RolloutSource``).

Sampled now on the live policy (the synchronous loop, ``max_policy_lag`` 0), or taken from the
sampling thread that drew it while the previous update ran (``training.sampling.overlap``), or from
a checkpoint's in-flight rollouts; under ``train_type.filter_groups``, resampled until the groups
are informative (``dynamic_sampling``).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from dataclasses import replace

from omegaconf import DictConfig
from torch import nn

from astrai.algorithms.strategy import Strategy
from astrai.distributed import DistContext, all_reduce_sum
from astrai.envs.hosts import close_all_pools
from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import Tokenizer
from astrai.rewards.base import Reward
from astrai.rollout.collectors import Collector
from astrai.rollout.engines.engine import Engine
from astrai.rollout.rollout import Rollout
from astrai.tasks.base import Problem, ProblemSource
from astrai.training.build import BuiltRun
from astrai.training.plan import StepPlan
from astrai.training.sampling.dynamic_sampling import RESAMPLE_SEED_STRIDE, sample_informative
from astrai.training.sampling.in_flight import SampledBatch, reissued, sampled_batches
from astrai.training.sampling.overlap import RolloutPipeline
from astrai.training.setup import capture_rng_state, restore_rng_state
from astrai.training.state import TrainState
from astrai.training.stopping import StopInterrupt, interruptible


class RolloutSource:
    """Each step's rollout and its sampling metrics, for the run ``parts`` built, sampled by
    ``engine``. It reads ``state`` (the step, the policy version, the random streams) and
    never writes it: the loop does. Owns ``pipeline``, the sampling thread (None in the
    synchronous loop, ``train_type.max_policy_lag`` 0) once ``start`` ran.

    ``plan``: the run's lag and the policy versions a step adds (``training.plan``).
    """

    def __init__(self, parts: BuiltRun, engine: Engine, state: TrainState, plan: StepPlan) -> None:
        self.cfg: DictConfig = parts.cfg
        self.dist: DistContext = parts.dist
        self.task: ProblemSource = parts.task
        self.tokenizer: Tokenizer = parts.tokenizer
        self.policy: LlamaForCausalLM = parts.policy
        self.strategy: Strategy = parts.strategy
        self.reward: Reward = parts.reward
        self.collector: Collector = parts.collector
        self.engine = engine
        self.state = state
        self.plan = plan
        self.sampling_metrics: dict[str, float] = {}  # the last rollout's dynamic sampling
        self.pipeline: RolloutPipeline | None = None

    def start(self) -> None:
        """With ``train_type.max_policy_lag`` > 0: start the sampling thread and hand it the
        checkpoint's in-flight rollouts (after the engine is built: vLLM samples its own);
        the pipeline owns them from here (the loop empties ``state``'s lists)."""
        if self.plan.max_policy_lag == 0:
            return
        self.pipeline = RolloutPipeline(
            self.sample_rollout,
            self.policy,
            self.plan.max_policy_lag,
            int(self.cfg.trainer.total_steps),
            # an engine with its own weights (vLLM) is its own snapshot
            snapshots=self.engine.samples_live_policy,
            stream=self.state.generators["sample"],  # rewound when a stop abandons a job
            abandonable=self.dist.world_size == 1,
        )
        # a checkpoint written before collectors applied mask_truncated: applied here
        in_flight = [
            replace(batch, rollout=self.collector.restored(batch.rollout))
            for batch in sampled_batches(self.state.in_flight)
        ]
        reissue = reissued(self.state.in_flight)
        self.pipeline.restore(in_flight, self.state.step + 1, reissue)

    def rollout(self) -> Rollout:
        """1. This step's rollout with the live policy (``sample_rollout``); the dynamic
        sampling's metrics land in ``sampling_metrics``."""
        rollout, self.sampling_metrics = self.sample_rollout(
            self.state.step, self.policy, self.state.policy_version
        )
        return rollout

    def sample_rollout(
        self, index: int, model: nn.Module, version: int
    ) -> tuple[Rollout, dict[str, float]]:
        """Sample G responses for the prompts of the step that trains at ``index`` steps done
        with ``model`` (the policy at ``version``: the live one, or a snapshot on the sampling
        thread) and score them; under ``train_type.filter_groups``, resample until the groups
        are informative (``dynamic_sampling``). Returns the rollout and the sampling's
        metrics."""
        sample = functools.partial(self.sample_round, model=model, version=version)
        draw = functools.partial(self.draw_problems, index=index)
        self.reward.take_timeouts()  # this thread's count from here on (not an evaluation's)
        if not self.strategy.filter_groups:
            return sample(draw(0)), self.timeout_count()
        rollout, metrics = sample_informative(
            sample,
            draw,
            self.strategy.prompts_per_step // self.dist.world_size,
            self.strategy.max_resample_rounds,
            self.tokenizer.pad_id,
            sum_over_ranks=all_reduce_sum,
            ranks=self.dist.world_size,
        )
        return rollout, {**metrics, **self.timeout_count()}

    def timeout_count(self) -> dict[str, float]:
        """This rank's responses scored ``reward.timeout_score`` by this thread since the last
        take: summed over the ranks with the rollout's statistics (``rollout_metrics``)."""
        return {"rollout/reward_timeouts": float(self.reward.take_timeouts())}

    def draw_problems(self, draw: int, index: int) -> list[Problem]:
        """The ``draw``-th batch of the training stream of the step trained at ``index`` steps
        done, every rank's prompts (0: the step's own; dynamic sampling's extra rounds draw
        further)."""
        seed = self.cfg.seed + RESAMPLE_SEED_STRIDE * draw
        return self.task.train_problems(seed, index, self.strategy.prompts_per_step)

    def sample_round(self, problems: list[Problem], model: nn.Module, version: int) -> Rollout:
        """This rank's share of one round's ``problems`` (every rank's), sampled with ``model``
        (the policy at ``version``) and scored."""
        share = len(problems) // self.dist.world_size  # divides evenly (validated, or cut to)
        problems = problems[self.dist.rank * share : (self.dist.rank + 1) * share]
        # the torch sampler samples the module it is given
        engine, generator = self.engine.on(model), self.state.generators["sample"]
        return self.collector.collect(problems, model, version, engine, generator)

    def next_batch(self) -> SampledBatch:
        """This step's sampled rollout: the sampling thread's (``max_policy_lag`` > 0, a
        checkpoint's in-flight ones first), or sampled now on the live policy (at lag 0 a
        checkpoint's in-flight rollouts are refused at start: each is >= 1 update behind)."""
        if self.pipeline is not None:
            return self.pipeline.take(self.state.step + 1, self.state.policy_version)
        start = time.perf_counter()
        self.sampling_metrics = {}
        with self.abandonable():
            rollout = self.rollout()
        # nothing samples again before the weight sync: an engine beside the trainer on the
        # device (vLLM's sleep mode) hands its memory to the scoring passes and the update now
        self.engine.before_update()
        return SampledBatch(
            self.state.step + 1, rollout, self.sampling_metrics, time.perf_counter() - start
        )

    def close(self) -> None:
        """Stop the sampling thread, if any, then end the environments' worker processes
        (``envs.hosts``: every thread's slots, the evaluation's too); idempotent."""
        if self.pipeline is not None:
            self.pipeline.close()
        close_all_pools()

    @contextlib.contextmanager
    def abandonable(self) -> Iterator[None]:
        """Sampling a step's rollout, which a stop signal may abandon at once
        (``stopping.interruptible``): the random streams go back to where the step began, so
        the checkpoint the stop writes is the state after the last completed step, and a
        resume samples this step exactly as it would have been. One process only."""
        if self.dist.world_size > 1:
            yield
            return
        before = capture_rng_state(self.state.generators)
        try:
            with interruptible():
                yield
        except StopInterrupt:
            restore_rng_state(before, self.state.generators)
            raise
