"""One RL step: collect → prepare → update (and the held-out evaluation), on a built and started
run. No math lives here; each numbered stage is one call into the module that owns it. The run
around the steps (start, the loop, checkpoints, close) is ``training.run``'s.
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch import Tensor
from torch.optim.lr_scheduler import LRScheduler

from astrai.algorithms.aggregation import Divisors
from astrai.distributed import all_reduce_max, all_reduce_sum, no_grad_for
from astrai.metrics.aggregate import MetricMeans
from astrai.metrics.names import kl_logged_at
from astrai.models.merged_weights import engine_weights
from astrai.models.precision import autocast
from astrai.rollout.minibatch import EpochSplit, Minibatch, flatten_rollout
from astrai.rollout.rollout import Rollout
from astrai.rollout.staleness import check_policy_lag
from astrai.training.accumulation import accumulate_gradients, ranks_divisors
from astrai.training.build import BuiltRun
from astrai.training.evaluation import EvalResult, evaluate
from astrai.training.loop import RunStart, StepOutcome
from astrai.training.nonfinite import SKIPPED_METRIC, NonFiniteGuard, Trained
from astrai.training.rollout_stats import rollout_metrics
from astrai.training.sample_log import logged_samples
from astrai.training.setup import on_device_while
from astrai.training.throughput import UpdateShape, step_throughput

LossOutput = tuple[torch.Tensor, dict[str, torch.Tensor]]


def last_lr(scheduler: LRScheduler) -> float:
    """The schedule's current learning rate (of its first parameter group)."""
    lr = scheduler.get_last_lr()[0]
    # a Tensor only for a Tensor lr, which no config gives (the optimizers' lr are numbers)
    assert not isinstance(lr, torch.Tensor)
    return lr


class Trainer:
    """The step of a run: collect a rollout, prepare it (π_old, the reference, the critic's
    values, the advantages), update, and the held-out evaluation. It reads what ``build_run``
    built (``parts``) and what ``loop.start_run`` started (``started``: the ``TrainState``, the
    schedules, the engine, the rollout source) and writes neither: a step returns what it did
    (``StepOutcome``) and the loop writes it into the state (``training.loop``).
    ``training.run.Run`` makes one for each run.
    """

    def __init__(self, parts: BuiltRun, started: RunStart) -> None:
        self.parts = parts
        self.started = started
        t = parts.cfg.trainer  # the update's clipping and its guard against NaN/inf steps
        self.nonfinite = NonFiniteGuard(t.max_grad_norm, t.max_nonfinite_updates, parts.dist)
        self.set_train_mode(False)  # eval but in the update (set_train_mode)

    def optimizer_steps_per_step(self) -> int:
        """Policy (and critic) optimizer steps per RL step: ``ppo_epochs × minibatches``."""
        return self.started.plan.updates_per_step

    def rollout(self) -> Rollout:
        """1. This step's rollout sampled now with the live policy (``RolloutSource``)."""
        return self.started.rollouts.rollout()

    # --- one RL step ---------------------------------------------------------------------------

    def prepare(self, rollout: Rollout, split: EpochSplit | None = None) -> dict[str, float]:
        """2. Reference logprobs, (critic values,) advantages, pinned on the rollout; statistics
        of the whole rollout are summed over the ranks. ``engine.old_logprobs: recompute``:
        first the trainer's own π_old and the mismatch correction's weights
        (``PassPlan.recompute_old_logprobs``). ``train_type.mask_truncated`` was applied by the
        collector (``rollout.loss_mask``: ``rollout.collectors``).

        π_old and the reference run ``split``'s forwards, the update's first epoch (default: the
        next ``update``'s), so the first ratio is exactly 1 (docs/how-it-works.md). At
        ``kl_coef`` 0 the reference feeds only the ``kl/*`` metrics, so it is scored only on the
        steps that log them (``metrics.names.kl_logged_at``: step 1 and every
        ``logger.kl_every``)."""
        metrics = {}
        self.set_train_mode(False)  # π_old, the reference and the critic score without dropout
        passes = self.started.plan.passes.through(split or self.epoch_split(rollout, draw=False))
        if self.started.plan.correction is not None:  # engine.old_logprobs: recompute
            with self.autocast():
                policy, correction = self.parts.policy, self.started.plan.correction
                metrics = passes.recompute_old_logprobs(
                    rollout, policy, correction, all_reduce_sum, all_reduce_max,
                    no_grad_for(policy),
                )  # fmt: skip
        score = kl_logged_at(
            self.started.state.step + 1, self.parts.strategy.kl_coef, self.parts.cfg.logger.kl_every
        )
        reference = self.parts.reference if score else None
        models = {role: reference if role == "reference" else model
                  for role, model in self.parts.models.items()}  # fmt: skip
        distiller = self.parts.distiller
        if distiller is not None:  # distill=opd: the teachers' scores, which prepare reads
            with self.autocast():
                metrics |= distiller.score(rollout, passes, all_reduce_sum)
        with self.reference_on_device(score), self.autocast():
            metrics |= self.parts.strategy.prepare(
                rollout,
                models,
                passes,
                sum_over_ranks=all_reduce_sum,
                no_grad=no_grad_for(reference) if reference is not None else torch.no_grad,
            )
        return metrics

    def reference_on_device(self, needed: bool = True) -> contextlib.AbstractContextManager:
        """``infra.offload_reference``: the frozen reference is moved to the training device
        for its scoring pass only and back to the CPU after it (as OpenRLHF's
        ``--ref_reward_offload``), so it holds no device memory while the update runs; not
        moved at all on a step that does not score it (not ``needed``)."""
        enabled = bool(self.parts.cfg.infra.offload_reference) and needed
        return on_device_while(self.parts.reference, self.parts.device, enabled)

    def epoch_split(self, rollout: Rollout, draw: bool = True) -> EpochSplit:
        """The update's next epoch over ``rollout``, from the ``shuffle`` stream (``draw``
        False: peeked), cut by the run's passes (``PassPlan.draw_epoch_split``); ``run_step``
        draws it before scoring."""
        shuffle = self.started.state.generators["shuffle"]
        with self.autocast():  # the budget counts bytes in the dtype the passes compute in
            return self.started.plan.passes.draw_epoch_split(
                self.parts.policy, rollout, shuffle, draw
            )

    def update(self, rollout: Rollout, split: EpochSplit | None = None) -> dict[str, float]:
        """3. ``ppo_epochs × minibatches`` optimizer steps on the pinned targets, in train
        mode (the policy's and the critic's: back to eval after), the first epoch ``split``
        (π_old's and the reference's; default: drawn now). ``policy/version`` is the version
        after them: every policy optimizer step taken is one (the loop counts them into
        ``state``); a step skipped for a non-finite loss or gradient norm is none, and counts
        in ``update/nonfinite_skipped`` only, not in the means (``training.nonfinite``). A
        recomputed π_old is the ratio's (``old_from_update`` only where none was)."""
        self.set_train_mode(True)
        means = MetricMeans()
        batch = flatten_rollout(
            rollout, self.started.plan.old_from_update and self.started.plan.correction is None
        )
        policy_steps = skipped = 0  # the loop adds the steps to ``state.policy_version``
        for epoch in range(self.started.plan.ppo_epochs):
            if epoch > 0 or split is None:
                split = self.epoch_split(rollout)
            for rows, parts in zip(split.minibatches, split.micro_batches, strict=True):
                metrics = self.backward(batch.select(rows), parts)
                stepped = self.optimizer_step(metrics)
                policy_steps, skipped = policy_steps + stepped, skipped + (not stepped)
                means.update(metrics if stepped else {})  # a skipped one: counted only, below
        # each rank's losses and stats are its share of the global value (ranks_divisors):
        # ``compute`` sums them over the ranks, once per update (one all-reduce)
        result = means.compute()
        result["policy/lr"] = last_lr(self.started.scheduler)
        if self.started.critic_scheduler is not None:
            result["value/lr"] = last_lr(self.started.critic_scheduler)
        result["policy/version"] = float(self.started.state.policy_version + policy_steps)
        result[SKIPPED_METRIC] = float(skipped)  # every rank skips alike (training.nonfinite)
        self.set_train_mode(False)
        return result

    def set_train_mode(self, training: bool) -> None:
        """The live policy's and critic's mode: train for the update only, eval (no dropout,
        e.g. LoRA's) for π_old, the reference, the critic's values, sampling and evaluation.
        Only this, the training thread, changes it: a sampling thread samples a snapshot or an
        engine's own weights and leaves the live modules' modes alone (issue 45)."""
        for module in (self.started.train_policy, self.started.train_critic):
            if module is not None:
                module.train(training)

    def backward(self, minibatch: Minibatch, parts: list[Tensor]) -> dict[str, Tensor]:
        """Gradients of the minibatch's token-mean loss, in micro-batches ``parts`` (row indices:
        ``EpochSplit``; ``accumulation``); returns its metrics."""

        def loss(part: Minibatch, divisors: Divisors | None) -> LossOutput:
            with self.autocast():
                return self.parts.strategy.loss(
                    self.started.train_policy, part, self.started.train_critic, divisors
                )

        divisors = ranks_divisors(minibatch, self.parts.dist.world_size)
        replicas = (self.started.train_policy, self.started.train_critic)
        return accumulate_gradients(minibatch, parts, divisors, loss, replicas)

    def autocast(self) -> torch.autocast:
        """The update's and the scoring passes' precision (``infra.precision``,
        ``models.precision``); sampling and evaluation are told it and open their own."""
        return autocast(self.parts.device, self.parts.cfg.infra.precision)

    def optimizer_step(self, metrics: dict[str, torch.Tensor]) -> bool:
        """Clip the policy's (and critic's) gradients with ``trainer.max_grad_norm`` (the norms
        into ``metrics``), step their optimizers and schedules unless the loss or a norm is not
        finite (``training.nonfinite``), clear the grads; whether it stepped. Only a policy
        step is a policy version (the critic steps outside the version guard)."""
        parts, started = self.parts, self.started
        trained = [Trained(parts.policy, parts.optimizer, started.scheduler, "policy/grad_norm")]
        if parts.critic is not None:
            optimizer, scheduler = parts.critic_optimizer, started.critic_scheduler
            assert optimizer is not None and scheduler is not None
            trained.append(Trained(parts.critic, optimizer, scheduler, "value/grad_norm"))
        return self.nonfinite.step(trained, metrics, self.started.state.step + 1)

    def run_step(self) -> StepOutcome:
        """One RL step: sample (or take) the rollout, score it, update; reads ``state`` and
        returns what the step did, for the loop to write into it."""
        t0 = time.perf_counter()
        batch = self.started.rollouts.next_batch()
        rollout = batch.rollout
        assert rollout.sample_versions is not None  # collect_rollout stamps every sample
        # the seed's version guard: a batch older than train_type.max_policy_lag is refused
        lag = check_policy_lag(
            rollout.sample_versions,
            self.started.state.policy_version,
            self.optimizer_steps_per_step(),
            self.started.plan.max_policy_lag,
            self.started.state.step + 1,
        )
        split = self.epoch_split(rollout)  # the update's first epoch, π_old's and the reference's
        metrics = {**batch.metrics, **lag, **self.prepare(rollout, split)}
        t1 = time.perf_counter()
        engine, pipeline = self.started.engine, self.started.rollouts.pipeline
        if pipeline is None:  # no sampling during the update: the engine may sleep
            engine.before_update()
        metrics.update(self.update(rollout, split))
        if pipeline is None:
            engine.after_update()
        t2 = time.perf_counter()
        if not engine.samples_live_policy:  # it takes the updated weights (HF names)
            if pipeline is not None:  # its jobs on the old weights finish first
                pipeline.before_weight_sync()
            # under LoRA the adapters merged in (models.merged_weights)
            metrics["perf/weight_sync_s"] = engine.sync_weights(engine_weights(self.parts.policy))
        threshold = self.parts.reward.accuracy_threshold
        timeouts = batch.metrics.get("rollout/reward_timeouts", 0.0)  # this rank's (sample_rollout)
        metrics.update(rollout_metrics(rollout, self.parts.tokenizer.stop_ids, threshold, timeouts))
        self.started.reward_signal_watch.observe(
            self.started.state.step + 1, rollout, metrics, all_reduce_max
        )
        metrics["time/rollout_s"] = t1 - t0
        metrics["time/update_s"] = t2 - t1
        metrics["perf/step_s"] = time.perf_counter() - t0  # the weight sync included
        # over the sampling's own time (on the sampling thread, when it overlapped the update)
        metrics["time/sample_s"] = batch.sample_s
        metrics["perf/tokens_per_s"] = float(rollout.response_mask.sum()) / max(
            batch.sample_s, 1e-9
        )
        critic = None if self.parts.critic is None else self.parts.critic.config
        shape = UpdateShape(self.parts.policy.config, critic, self.started.plan.ppo_epochs)
        precision = self.parts.cfg.infra.precision
        metrics.update(step_throughput(shape, rollout, t2 - t1, metrics["perf/step_s"], precision))
        samples = logged_samples(
            rollout, self.started.state.step + 1, self.parts.cfg.logger, self.parts.tokenizer
        )
        return StepOutcome(metrics, int(metrics["policy/version"]), samples)

    # --- evaluation -----------------------------------------------------------------------------

    def evaluate(self) -> EvalResult:
        """Greedy answers to the held-out prompts."""
        return evaluate(
            self.parts.policy,
            self.parts.tokenizer,
            self.parts.reward,
            self.parts.eval_problems,
            self.parts.strategy.sampling.max_new_tokens,
            precision=self.parts.cfg.infra.precision,
            engine=self.started.engine,
            collector=self.parts.collector,
        )
