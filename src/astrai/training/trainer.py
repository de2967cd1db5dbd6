"""The training loop: rollout → score → advantages → update → log / evaluate.

No math lives here; each numbered stage is one call into the module that owns it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.optim.lr_scheduler import LRScheduler

from astrai.algorithms.aggregation import Divisors
from astrai.algorithms.strategy import Strategy
from astrai.distributed import DistContext, all_reduce_max, all_reduce_sum, no_grad_for
from astrai.files import naming_write_errors
from astrai.metrics.aggregate import MetricMeans
from astrai.metrics.names import kl_logged_at
from astrai.metrics.writers import RunLogger
from astrai.models.llama import LlamaForCausalLM
from astrai.models.merged_weights import engine_weights
from astrai.models.precision import autocast
from astrai.models.tokenizer import Tokenizer
from astrai.models.value_model import ValueModel
from astrai.rewards.base import Reward
from astrai.rollout.engine import Engine
from astrai.rollout.minibatch import EpochSplit, Minibatch, flatten_rollout
from astrai.rollout.rollout import Rollout, ended_with_eos
from astrai.rollout.staleness import check_policy_lag
from astrai.tasks.base import Problem, ProblemSource
from astrai.training.accumulation import accumulate_gradients, ranks_divisors
from astrai.training.announce import announce_run, prompt_count_summary, write_dashboards
from astrai.training.background_save import CheckpointWrites
from astrai.training.banner import format_eval_line
from astrai.training.build import BuiltRun, Forward, JobContext, build_run
from astrai.training.checkpointing import settled_state
from astrai.training.evaluation import EvalResult, evaluate
from astrai.training.loop import (
    RunStart,
    StepResult,
    run_loop,
    start_run,
    take_step,
)
from astrai.training.nonfinite import SKIPPED_METRIC, NonFiniteGuard, Trained, check_finite_weights
from astrai.training.overlap import RolloutPipeline
from astrai.training.plan import StepPlan
from astrai.training.rollout_source import RolloutSource
from astrai.training.rollout_stats import rollout_metrics
from astrai.training.sample_log import logged_samples
from astrai.training.setup import on_device_while
from astrai.training.signal_watch import SignalWatch
from astrai.training.state import TrainState
from astrai.training.stopping import StopInterrupt, interruptible
from astrai.training.throughput import UpdateShape, step_throughput

log = logging.getLogger(__name__)

LossOutput = tuple[torch.Tensor, dict[str, torch.Tensor]]


def last_lr(scheduler: LRScheduler) -> float:
    """The schedule's current learning rate (of its first parameter group)."""
    lr = scheduler.get_last_lr()[0]
    # a Tensor only for a Tensor lr, which no config gives (the optimizers' lr are numbers)
    assert not isinstance(lr, torch.Tensor)
    return lr


class Trainer:
    """One RL step of a run, and the run's objects: ``parts`` (what ``build_run`` built) and
    ``run`` (what ``loop.start_run`` started: the ``TrainState``, schedules, engine, rollout
    source, logger). A step reads ``state`` and returns what it did; the loop
    (``training.loop``) is the only writer of ``state``.

    ``Trainer(cfg, run_dir)`` builds and starts a run (resuming as ``ckpt.resume`` says) and
    ``fit`` runs it; ``job_context``: the Hydra job's command-line overrides and group choices
    (default: the current job's, empty outside Hydra); an elastic worker gets its launcher's.
    """

    # what the step reads off the built run and the started one (``BuiltRun``, ``RunStart``)
    cfg: Forward[DictConfig] = Forward("parts")
    run_dir: Forward[Path] = Forward("parts")
    job_overrides: Forward[list[str]] = Forward("parts")
    job_choices: Forward[dict[str, object]] = Forward("parts")
    dist: Forward[DistContext] = Forward("parts")
    device: Forward[torch.device] = Forward("parts")
    tokenizer: Forward[Tokenizer] = Forward("parts")
    task: Forward[ProblemSource] = Forward("parts")
    policy: Forward[LlamaForCausalLM] = Forward("parts")
    reference: Forward[nn.Module] = Forward("parts")
    critic: Forward[ValueModel | None] = Forward("parts")
    critic_optimizer: Forward[torch.optim.Optimizer | None] = Forward("parts")
    strategy: Forward[Strategy] = Forward("parts")
    optimizer: Forward[torch.optim.Optimizer] = Forward("parts")
    sharded: Forward[bool] = Forward("parts")
    parameter_counts: Forward[tuple[int, int | None]] = Forward("parts")
    adapter_counts: Forward[tuple[int, int | None] | None] = Forward("parts")
    reward: Forward[Reward] = Forward("parts")
    eval_problems: Forward[list[Problem]] = Forward("parts")
    state: Forward[TrainState] = Forward("run")
    scheduler: Forward[LRScheduler] = Forward("run")
    critic_scheduler: Forward[LRScheduler | None] = Forward("run")
    engine: Forward[Engine] = Forward("run")
    plan: Forward[StepPlan] = Forward("run")
    rollouts: Forward[RolloutSource] = Forward("run")
    logger: Forward[RunLogger] = Forward("run")
    train_policy: Forward[nn.Module] = Forward("run")
    train_critic: Forward[nn.Module | None] = Forward("run")
    signal_watch: Forward[SignalWatch] = Forward("run")
    pipeline: Forward[RolloutPipeline | None] = Forward("rollouts")  # None: no sampling thread
    sampling_metrics: Forward[dict[str, float]] = Forward("rollouts")  # the last rollout's

    def __init__(
        self, cfg: DictConfig, run_dir: str | Path, job_context: JobContext | None = None
    ) -> None:
        self.parts: BuiltRun = build_run(cfg, run_dir, job_context)
        self.run: RunStart = start_run(self.parts)
        self.checkpoint_writes = CheckpointWrites()  # at most one written in the background
        t = self.cfg.trainer  # the update's clipping and its guard against NaN/inf steps
        self.nonfinite = NonFiniteGuard(t.max_grad_norm, t.max_nonfinite_updates, self.dist)
        self.set_train_mode(False)  # eval but in the update (set_train_mode)

    def optimizer_steps_per_step(self) -> int:
        """Policy (and critic) optimizer steps per RL step: ``ppo_epochs × minibatches``."""
        return self.plan.updates_per_step

    def rollout(self) -> Rollout:
        """1. This step's rollout sampled now with the live policy (``RolloutSource``)."""
        return self.rollouts.rollout()

    # --- one RL step ---------------------------------------------------------------------------

    def prepare(self, rollout: Rollout, split: EpochSplit | None = None) -> dict[str, float]:
        """2. Reference logprobs, (critic values,) advantages, pinned on the rollout; statistics
        of the whole rollout are summed over the ranks. ``engine.old_logprobs: recompute``:
        first the trainer's own π_old and the mismatch correction's weights
        (``Strategy.recompute_old_logprobs``). ``train_type.mask_truncated``: the
        responses cut at the length limit leave the loss (``rollout.loss_mask``).

        π_old and the reference run ``split``'s forwards, the update's first epoch (default: the
        next ``update``'s), so the first ratio is exactly 1 (docs/how-it-works.md). At
        ``kl_coef`` 0 the reference feeds only the ``kl/*`` metrics, so it is scored only on the
        steps that log them (``metrics.names.kl_logged_at``: step 1 and every
        ``logger.kl_every``)."""
        metrics = {}
        self.set_train_mode(False)  # π_old, the reference and the critic score without dropout
        split = split or self.epoch_split(rollout, draw=False)
        if self.plan.correction is not None:  # engine.old_logprobs: recompute
            with self.autocast():
                metrics = self.strategy.recompute_old_logprobs(
                    rollout, self.policy, self.plan.correction, all_reduce_sum, all_reduce_max,
                    no_grad_for(self.policy), split,
                )  # fmt: skip
        if self.strategy.mask_truncated and rollout.sampled_mask is None:  # episodes: at collect
            eos = ended_with_eos(
                rollout.response_ids, rollout.response_mask, self.tokenizer.stop_ids
            )
            rollout.loss_mask = rollout.response_mask & eos[..., None]
        score = kl_logged_at(self.state.step + 1, self.strategy.kl_coef, self.cfg.logger.kl_every)
        reference = self.reference if score else None
        models = {role: reference if role == "reference" else model
                  for role, model in self.parts.models.items()}  # fmt: skip
        scoring = self.strategy.scoring_through(split)
        with self.reference_on_device(score), self.autocast(), scoring:
            metrics |= self.strategy.prepare(
                rollout,
                models,
                sum_over_ranks=all_reduce_sum,
                no_grad=no_grad_for(reference) if reference is not None else torch.no_grad,
            )
        return metrics

    def reference_on_device(self, needed: bool = True) -> contextlib.AbstractContextManager:
        """``infra.offload_reference``: the frozen reference is moved to the training device
        for its scoring pass only and back to the CPU after it (as OpenRLHF's
        ``--ref_reward_offload``), so it holds no device memory while the update runs; not
        moved at all on a step that does not score it (not ``needed``)."""
        enabled = bool(self.cfg.infra.offload_reference) and needed
        return on_device_while(self.reference, self.device, enabled)

    def epoch_split(self, rollout: Rollout, draw: bool = True) -> EpochSplit:
        """The update's next epoch over ``rollout``, from the ``shuffle`` stream (``draw``
        False: peeked, ``Strategy.draw_epoch_split``); ``run_step`` draws it before scoring."""
        shuffle = self.state.generators["shuffle"]
        with self.autocast():  # the budget counts bytes in the dtype the passes compute in
            return self.strategy.draw_epoch_split(self.policy, rollout, shuffle, draw)

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
        batch = flatten_rollout(rollout, self.plan.old_from_update and self.plan.correction is None)
        policy_steps = skipped = 0  # the loop adds the steps to ``state.policy_version``
        for epoch in range(self.strategy.ppo_epochs):
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
        result["policy/lr"] = last_lr(self.scheduler)
        if self.critic_scheduler is not None:
            result["value/lr"] = last_lr(self.critic_scheduler)
        result["policy/version"] = float(self.state.policy_version + policy_steps)
        result[SKIPPED_METRIC] = float(skipped)  # every rank skips alike (training.nonfinite)
        self.set_train_mode(False)
        return result

    def set_train_mode(self, training: bool) -> None:
        """The live policy's and critic's mode: train for the update only, eval (no dropout,
        e.g. LoRA's) for π_old, the reference, the critic's values, sampling and evaluation.
        Only this, the training thread, changes it: a sampling thread samples a snapshot or an
        engine's own weights and leaves the live modules' modes alone (issue 45)."""
        for module in (self.train_policy, self.train_critic):
            if module is not None:
                module.train(training)

    def backward(self, minibatch: Minibatch, parts: list[Tensor]) -> dict[str, Tensor]:
        """Gradients of the minibatch's token-mean loss, in micro-batches ``parts`` (row indices:
        ``EpochSplit``; ``accumulation``); returns its metrics."""

        def loss(part: Minibatch, divisors: Divisors | None) -> LossOutput:
            with self.autocast():
                return self.strategy.loss(self.train_policy, part, self.train_critic, divisors)

        divisors = ranks_divisors(minibatch, self.dist.world_size)
        replicas = (self.train_policy, self.train_critic)
        return accumulate_gradients(minibatch, parts, divisors, loss, replicas)

    def autocast(self) -> torch.autocast:
        """The update's and the scoring passes' precision (``infra.precision``,
        ``models.precision``); sampling and evaluation are told it and open their own."""
        return autocast(self.device, self.cfg.infra.precision)

    def optimizer_step(self, metrics: dict[str, torch.Tensor]) -> bool:
        """Clip the policy's (and critic's) gradients with ``trainer.max_grad_norm`` (the norms
        into ``metrics``), step their optimizers and schedules unless the loss or a norm is not
        finite (``training.nonfinite``), clear the grads; whether it stepped. Only a policy
        step is a policy version (the critic steps outside the version guard)."""
        trained = [Trained(self.policy, self.optimizer, self.scheduler, "policy/grad_norm")]
        if self.critic is not None:
            assert self.critic_optimizer is not None and self.critic_scheduler is not None
            norm = "value/grad_norm"
            trained.append(Trained(self.critic, self.critic_optimizer, self.critic_scheduler, norm))
        return self.nonfinite.step(trained, metrics, self.state.step + 1)

    def train_step(self) -> dict[str, float]:
        """One RL step, ``state`` advanced by the loop (``loop.take_step``); its metrics."""
        return take_step(self)

    def run_step(self) -> StepResult:
        """One RL step: sample (or take) the rollout, score it, update; reads ``state`` and
        returns what the step did, for the loop to write into it."""
        t0 = time.perf_counter()
        batch = self.rollouts.next_batch()
        rollout = batch.rollout
        assert rollout.sample_versions is not None  # collect_rollout stamps every sample
        # the seed's version guard: a batch older than train_type.max_policy_lag is refused
        lag = check_policy_lag(
            rollout.sample_versions,
            self.state.policy_version,
            self.optimizer_steps_per_step(),
            self.plan.max_policy_lag,
            self.state.step + 1,
        )
        split = self.epoch_split(rollout)  # the update's first epoch, π_old's and the reference's
        metrics = {**batch.metrics, **lag, **self.prepare(rollout, split)}
        t1 = time.perf_counter()
        alone = self.pipeline is None  # no sampling during the update: the engine may sleep
        if alone:
            self.engine.before_update()
        metrics.update(self.update(rollout, split))
        if alone:
            self.engine.after_update()
        t2 = time.perf_counter()
        if not self.engine.samples_live_policy:  # it takes the updated weights (HF names)
            if self.pipeline is not None:  # its jobs on the old weights finish first
                self.pipeline.before_weight_sync()
            # under LoRA the adapters merged in (models.merged_weights)
            metrics["perf/weight_sync_s"] = self.engine.sync_weights(engine_weights(self.policy))
        threshold = self.reward.accuracy_threshold
        timeouts = batch.metrics.get("rollout/reward_timeouts", 0.0)  # this rank's (sample_rollout)
        metrics.update(rollout_metrics(rollout, self.tokenizer.stop_ids, threshold, timeouts))
        self.signal_watch.observe(self.state.step + 1, rollout, metrics, all_reduce_max)
        metrics["time/rollout_s"] = t1 - t0
        metrics["time/update_s"] = t2 - t1
        metrics["perf/step_s"] = time.perf_counter() - t0  # the weight sync included
        # over the sampling's own time (on the sampling thread, when it overlapped the update)
        metrics["time/sample_s"] = batch.sample_s
        metrics["perf/tokens_per_s"] = float(rollout.response_mask.sum()) / max(
            batch.sample_s, 1e-9
        )
        critic = None if self.critic is None else self.critic.config
        shape = UpdateShape(self.policy.config, critic, self.strategy.ppo_epochs)
        precision = self.cfg.infra.precision
        metrics.update(step_throughput(shape, rollout, t2 - t1, metrics["perf/step_s"], precision))
        samples = logged_samples(rollout, self.state.step + 1, self.cfg.logger, self.tokenizer)
        return StepResult(metrics, int(metrics["policy/version"]), samples)

    # --- evaluation and the loop ----------------------------------------------------------------

    def evaluate(self) -> EvalResult:
        """Greedy answers to the held-out prompts."""
        return evaluate(
            self.policy,
            self.tokenizer,
            self.reward,
            self.eval_problems,
            self.strategy.sampling.max_new_tokens,
            precision=self.cfg.infra.precision,
            engine=self.engine,
            env=self.parts.env,
        )

    def eval_metrics(self) -> dict[str, float]:
        """The evaluation's metrics; {} when a stop signal abandoned it (one process: an
        evaluation changes no training state)."""
        t0 = time.perf_counter()
        try:
            with interruptible(self.dist.world_size == 1):
                result = self.evaluate()
        except StopInterrupt:
            return {}
        self.log_samples("samples/eval", result.samples)
        return {**result.metrics(), "time/eval_s": time.perf_counter() - t0}

    def log_samples(self, tag: str, rows: list[tuple[str, str, float]]) -> None:
        """``logger.num_samples`` of ``rows`` (prompt, response, reward) at this step."""
        self.logger.log_samples(self.state.step, tag, rows[: self.cfg.logger.num_samples])

    def fit(self, until: int | None = None) -> dict[str, object]:
        """Train up to ``trainer.total_steps`` (or ``until``, if smaller), checkpointing on
        schedule, on SIGTERM/SIGINT, when ``trainer.max_duration`` is spent and at the end
        (``training.loop``). Returns the summary also written to ``summary.json``; ``stopped``
        says why a run ended before ``total_steps`` (None when it completed)."""
        return run_loop(self, until)

    def announce(self) -> None:
        """The TensorBoard dashboards, then (rank 0) the start banner (``announce``)."""
        write_dashboards(self)
        announce_run(self)

    def prompt_counts(self) -> dict[str, object]:
        """The task's prompt counts, for ``summary.json`` (``prompt_count_summary``)."""
        return prompt_count_summary(self.task, len(self.eval_problems))

    def log_eval_line(self, metrics: dict[str, float]) -> None:
        """Rank 0: one INFO line per evaluation, so ``train.log`` grows as the run goes."""
        if self.dist.is_main:
            log.info(format_eval_line(self.state.step, self.cfg.trainer.total_steps, metrics))

    def save_checkpoint(self, background: bool = False) -> Path:
        """Write ``checkpoints/step_<step>/`` atomically, then prune beyond ``ckpt.keep_last``;
        returns its path. ``background`` (with ``ckpt.background``): returns once the state is
        copied to host memory, and a thread writes it (``training.background_save``);
        ``wait_for_checkpoint`` waits for that write and raises its failure. Weights that are
        not finite are refused (``training.nonfinite``), every rank alike, before any write."""
        self.checkpoint_writes.wait()  # the previous write's failure before anything else
        models = {"policy": self.policy, "critic": self.critic}
        check_finite_weights(models, f"step_{self.state.step}", all_reduce_max)
        state = self.state
        if self.pipeline is not None:  # the rollouts sampled for the next steps go with it
            state = settled_state(state, self.pipeline.settle(), self.pipeline.stream)
        parts = self.parts.checkpoint_parts(self.scheduler, self.critic_scheduler)
        background = background and bool(self.cfg.ckpt.get("background", False))
        return self.checkpoint_writes.save(parts, state, background)

    def wait_for_checkpoint(self) -> None:
        """The background write, if any, complete on disk (its failure raised on every rank)."""
        self.checkpoint_writes.wait()

    def close(self) -> None:
        """Free what the run holds beyond its memory (a checkpoint being written finished first,
        the engine, reward workers); idempotent. ``train.py`` and torchrun workers call it."""
        self.checkpoint_writes.close()
        self.rollouts.close()
        self.engine.close()
        self.reward.close()  # its worker processes (astrai.rewards.worker)

    def save_config(self) -> None:
        if not self.dist.is_main:
            return
        with naming_write_errors(self.run_dir / "config.yaml"):  # a full disk names the file
            (self.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
