"""A run's start and its loop around the steps, the only writer of its ``TrainState``.

``start_run``: resume or start (the ``TrainState``, restored from a checkpoint or fresh), the
learning-rate schedules, the engine, the rollout source and the logger, for a run
``build_run`` built. ``run_loop``: the schedule around the steps: the step-0 evaluation, a step
(``take_step``: the step, ``Trainer.run_step``, reads the state and returns what it did; this
module writes it), an evaluation every ``trainer.eval_every``, logging, checkpoints on schedule
and when the run stops (a signal at any time, ``trainer.max_duration``, metrics reaching
``trainer.stop_at``), the summary. How soon a stop takes effect (the bound) is
``training.stopping``'s; under ``python train.py`` the budget counts from start-up
(``stopping.job_budget``), for a ``Run.fit`` called directly from the loop's start.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler
from tqdm import tqdm

from astrai.config.duration import parse_duration
from astrai.metrics.dashboards import hparams_end_summary
from astrai.metrics.loggers import open_run_logger
from astrai.metrics.targets import parse_targets, targets_reached
from astrai.metrics.writers import METRICS_FILE, RunLogger
from astrai.rollout.engines.engine import Engine, build_engine
from astrai.training.build import BuiltRun
from astrai.training.checkpointing import restore_training_checkpoint
from astrai.training.node import node_name
from astrai.training.parallel import replicas
from astrai.training.plan import StepPlan, step_plan
from astrai.training.progress import progress_bar
from astrai.training.resume import resolve_resume
from astrai.training.reward_signal import GROUP_BASELINES, RewardSignalWatch
from astrai.training.sampling.in_flight import check_in_flight, sampled_batches
from astrai.training.sampling.rollout_source import RolloutSource
from astrai.training.schedule import build_schedulers, resumed_schedule_steps
from astrai.training.setup import make_generator
from astrai.training.state import TrainState
from astrai.training.stop_agreement import agreed_stop_reason
from astrai.training.stopping import StopInterrupt, StopRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepOutcome:
    """What one RL step did, for the loop to write into the ``TrainState``: its ``metrics``,
    the ``policy_version`` its optimizer steps reached, and the rollout's ``samples`` to log
    (prompt, response, reward) when the step logs them (``training.sample_log``: every
    ``logger.samples_every`` steps, an episode run's step 1 too; else None)."""

    metrics: dict[str, float]
    policy_version: int
    samples: list[tuple[str, str, float]] | None = None


@dataclass(frozen=True)
class RunStart:
    """What ``start_run`` started for a built run (``Run.started``; the step reads it too).

    Attributes:
        state: the run's ``TrainState``, fresh or restored; this module writes it.
        scheduler, critic_scheduler: the learning-rate schedules (the span a resume chose).
        engine: what samples the rollouts and the evaluations.
        plan: what the steps read off the algorithm and the engine (``training.plan``).
        rollouts: each step's rollout (the sampling thread started, at a lag).
        logger: metrics.jsonl, TensorBoard, W&B, MLflow, as ``cfg.logger`` selects.
        train_policy, train_critic: what the update's forward runs (DDP replicas when
            replicated; the modules themselves otherwise).
        reward_signal_watch: says, after a few steps in a row, that the rewards carry no signal.
    """

    state: TrainState
    scheduler: LRScheduler
    critic_scheduler: LRScheduler | None
    engine: Engine
    plan: StepPlan
    rollouts: RolloutSource
    logger: RunLogger
    train_policy: nn.Module
    train_critic: nn.Module | None
    reward_signal_watch: RewardSignalWatch


def start_run(parts: BuiltRun) -> RunStart:
    """Resume (``ckpt.resume``) or start the run ``parts`` holds. A bad checkpoint is refused
    before anything is started or written; the engine is built after the restore, so an engine
    with its own weights starts from the resumed ones."""
    cfg, strategy = parts.cfg, parts.strategy
    resume = resolve_resume(
        cfg.ckpt.resume, parts.run_dir, strategy, adapters=parts.lora is not None
    )
    # read before the schedules are built: a resume with another total_steps may keep the
    # curve the checkpoint's schedules were built for (``ckpt.resume_schedule``)
    saved = resume.record if resume is not None else None
    plan = step_plan(cfg, strategy)
    span = resumed_schedule_steps(cfg, saved, plan.updates_per_step, strategy.scheduler)
    scheduler, critic_scheduler = build_schedulers(parts, span.steps)
    # each rank samples its own responses: its own stream (rank 0's is the 1-process one)
    generators = {
        "sample": make_generator(cfg.seed + 1 + 7919 * parts.dist.rank, parts.device),
        "shuffle": make_generator(cfg.seed + 2, torch.device("cpu")),
    }
    state = TrainState(generators, span.steps)
    if resume is not None:  # before anything is written: a bad checkpoint leaves the dir alone
        objects = parts.checkpointed_objects(scheduler, critic_scheduler)
        state = restore_training_checkpoint(objects, resume, state)
        check_resumed_in_flight(state, plan)  # before anything is started or written
        log.info("resumed from %s at step %d", resume.path, state.step)
        if span.notice is not None:  # said once the checkpoint is accepted
            log.warning("%s", span.notice)
    engine = build_engine(cfg.get("engine"), parts.policy, parts.tokenizer, cfg.infra.precision)
    rollouts = RolloutSource(parts, engine, state, plan)
    rollouts.start()  # at a lag: the sampling thread, which takes over the in-flight rollouts
    state.in_flight = []
    train_policy, train_critic = replicas(
        parts.policy, parts.critic, parts.device, parts.dist.world_size, parts.sharded
    )
    return RunStart(
        state=state,
        scheduler=scheduler,
        critic_scheduler=critic_scheduler,
        engine=engine,
        plan=plan,
        rollouts=rollouts,
        logger=open_run_logger(
            cfg, parts.run_dir, logged_up_to(state, parts.run_dir), parts.dist.is_main
        ),
        train_policy=train_policy,
        train_critic=train_critic,
        # a run whose rewards carry no signal says so (rank 0), after a few such steps in a row
        reward_signal_watch=RewardSignalWatch(
            strategy.advantage in GROUP_BASELINES,
            strategy.sampling.max_new_tokens,
            enabled=parts.dist.is_main,
            watch_reward=parts.distiller is None,  # a teacher's signal needs no reward spread
        ),
    )


def check_resumed_in_flight(state: TrainState, plan: StepPlan) -> None:
    """Refuse, at start and naming the checkpoint, the in-flight rollouts a resumed run would
    refuse when it came to them (``train_type.max_policy_lag`` lowered)."""
    batches = sampled_batches(state.in_flight)  # the re-issued ones are sampled afresh
    if batches:
        check_in_flight(
            batches,
            state.policy_version,
            plan.updates_per_step,
            plan.max_policy_lag,
            state.resumed_from,
        )


def logged_up_to(state: TrainState, run_dir: Path) -> int | None:
    """The last step whose logged rows a (re)start keeps: the checkpoint's step on resume; -1
    (none) for a fresh start into a dir a crashed run logged into before its first checkpoint,
    so its rows are not logged twice; None for a fresh dir."""
    if state.resumed_from is not None:
        return state.step
    return -1 if (run_dir / METRICS_FILE).is_file() else None


class Step(Protocol):
    """The step a run takes (``training.trainer.Trainer``)."""

    def run_step(self) -> StepOutcome:
        """One RL step; reads the state and returns what it did."""


class LoopedRun(Protocol):
    """What the loop drives (``training.run.Run``): its ``started.state`` is the loop's to read
    and advance; everything else it asks of the run is between the steps."""

    @property
    def parts(self) -> BuiltRun:
        """What ``build_run`` built."""

    @property
    def started(self) -> RunStart:
        """What ``start_run`` started."""

    @property
    def trainer(self) -> Step:
        """The step."""

    def announce(self) -> None:
        """The dashboards and the start banner."""

    def log_samples(self, tag: str, rows: list[tuple[str, str, float]]) -> None:
        """Log ``rows`` (prompt, response, reward) at the current step."""

    def eval_metrics(self) -> dict[str, float]:
        """The evaluation's metrics; {} when a stop signal abandoned it."""

    def save_checkpoint(self, background: bool = False) -> Path:
        """A checkpoint of the state and the trained objects (``background``: written on a
        thread after a host copy, when ``ckpt.background``)."""

    def wait_for_checkpoint(self) -> None:
        """The checkpoint written in the background, if any, complete (its failure raised)."""

    def log_eval_line(self, metrics: dict[str, float]) -> None:
        """One INFO line per evaluation (rank 0)."""

    def prompt_counts(self) -> dict[str, object]:
        """The task's train and held-out prompt counts, for the summary."""


def run_loop(run: LoopedRun, until: int | None = None) -> dict[str, object]:
    """Train up to ``trainer.total_steps`` (or ``until``, if smaller); returns the summary also
    written to ``summary.json``. Its one caller is the run's ``fit`` (``training.run``)."""
    state = run.started.state
    total = run.parts.cfg.trainer.total_steps
    last_step = total if until is None else min(until, total)
    targets = parse_targets(run.parts.cfg.trainer.stop_at)  # validated at start
    reached: dict[str, float] | None = None
    budget = run.parts.cfg.trainer.max_duration
    start = time.perf_counter()
    elapsed_before = run.started.logger.latest.get("time/elapsed_s", 0.0)  # earlier segments
    run.announce()
    saved_step = state.step if state.resumed_from is not None else None
    checkpoint: Path | None = state.resumed_from
    show_bar = bool(run.parts.cfg.trainer.progress_bar)  # drawn on a terminal only
    budget_s = parse_duration(budget) if budget is not None else None
    with progress_bar(show_bar, total, state.step) as bar, StopRequest(budget_s) as stop:
        stopped = evaluate_before_the_steps(run, stop)
        while stopped is None and state.step < last_step:
            try:
                metrics = take_step(run)
            except StopInterrupt as interrupt:  # sampling abandoned (``abandonable``): a
                stopped = interrupt.signal_name  # signal, or the time budget (``max_duration``)
                if saved_step != state.step:
                    checkpoint, saved_step = run.save_checkpoint(), state.step
                log.warning(
                    "stopped (%s) while sampling step %d: %s",
                    stopped,
                    state.step + 1,
                    checkpoint or "nothing to save",
                )
                break
            elapsed = elapsed_before + time.perf_counter() - start
            evaluate_and_log(run, metrics, elapsed, bar)
            if state.step < total:  # the last step ends the run anyway
                reached = targets_reached(targets, metrics, run.started.logger.latest)
            stopped = agreed_stop_reason(stop.reason or ("stop_at" if reached else None))
            if stopped == "stop_at":
                log.info("trainer.stop_at reached at step %d: %s", state.step, _reached(reached))
            every = run.parts.cfg.ckpt.every_steps
            if stopped is not None or (every > 0 and state.step % every == 0):
                # in the background while the next steps run; a stop's or the last one's at
                # once: nothing follows that the write could overlap
                background = stopped is None and state.step < last_step
                checkpoint, saved_step = run.save_checkpoint(background), state.step
                # a stop asked for while it waited on the sampling thread: that checkpoint
                # abandoned the unfinished rollouts (``overlap``), so this is the stop's
                stopped = stopped or agreed_stop_reason(stop.reason)
            if stopped is not None:
                run.wait_for_checkpoint()  # complete before it is named
                pending = " (its evaluation, abandoned, runs first on resume)"
                log.warning(
                    "stopped (%s) at step %d: %s%s",
                    stopped,
                    state.step,
                    checkpoint,
                    pending if state.eval_pending else "",
                )
                break
        if saved_step != state.step and state.step > 0:  # the end of the run (or ``until``)
            checkpoint = run.save_checkpoint()
        run.wait_for_checkpoint()  # the summary names a complete checkpoint only
    return close_run(run, time.perf_counter() - start, stopped, checkpoint, reached)


def evaluate_before_the_steps(run: LoopedRun, stop: StopRequest) -> str | None:
    """The step-0 evaluation (a fresh run) and a resumed step's abandoned one, unless a stop
    came first; returns the agreed reason to stop before any step (None: go on)."""
    state = run.started.state
    # the ranks agree before evaluating: under FSDP an evaluation is collectives (weight
    # gathers) that a rank signalled during start-up would leave waiting
    stopped = agreed_stop_reason(stop.signal_name)
    if state.step == 0 and stopped is None:
        state.initial_metrics = run.eval_metrics()
        if state.initial_metrics:
            run.started.logger.log(state.step, state.initial_metrics)
            run.log_eval_line(state.initial_metrics)
    if state.eval_pending and stopped is None:
        evaluate_pending_step(run)
    # a signal during start-up or an evaluation before the first step (or the time budget
    # spent there): none was taken, so the state is the one the run started from (fresh, or
    # the checkpoint resumed)
    stopped = stopped or agreed_stop_reason(stop.reason)
    if stopped is not None:
        log.warning("stopped (%s) before step %d: nothing new to save", stopped, state.step + 1)
    return stopped


def evaluate_and_log(run: LoopedRun, metrics: dict[str, float], elapsed: float, bar: tqdm) -> None:
    """The evaluation when ``trainer.eval_every`` (or the last step) falls on this step, then
    its row, logged with ``elapsed`` (the run's seconds so far), and the progress bar."""
    state, total = run.started.state, run.parts.cfg.trainer.total_steps
    evaluated = state.step % run.parts.cfg.trainer.eval_every == 0 or state.step == total
    if evaluated:
        evaluation = run.eval_metrics()  # {}: a stop signal abandoned it
        metrics.update(evaluation)
        evaluated = bool(evaluation)
        state.eval_pending = not evaluated  # the checkpoint the stop writes says so
    metrics["time/elapsed_s"] = elapsed
    run.started.logger.log(state.step, metrics)
    if evaluated:
        run.log_eval_line(metrics)
    bar.update(1)
    bar.set_postfix(
        reward=f"{metrics['rollout/reward_mean']:.3f}",
        eval_acc=f"{run.started.logger.latest.get('eval/accuracy', float('nan')):.2f}",
        step_s=f"{metrics['perf/step_s']:.2f}",
    )


def close_run(
    run: LoopedRun,
    wall_time_s: float,
    stopped: str | None,
    checkpoint: Path | None,
    reached: dict[str, float] | None,
) -> dict[str, object]:
    """Write ``summary.json`` and close the logger; returns the summary and the last metrics."""
    state, total = run.started.state, run.parts.cfg.trainer.total_steps
    summary: dict[str, object] = {
        "step": state.step,
        "wall_time_s": wall_time_s,
        "initial/eval/accuracy": state.initial_metrics.get("eval/accuracy"),
        "train_type": run.parts.strategy.name,
        "run_dir": str(run.parts.run_dir),
        "stopped": stopped,
        "node": node_name(),  # where it ran (a Slurm job's nodes, a Ray node, else the host)
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        **run.prompt_counts(),
    }
    if stopped == "stop_at":  # the values that met trainer.stop_at (None on a rank that
        summary["stop_at"] = reached  # stopped because another one reached them)
    if state.step == total:  # HParams status: complete (a stopped run may be resumed)
        run.started.logger.log_summaries(state.step, [hparams_end_summary()])
    run.started.logger.write_summary(summary)
    run.started.logger.close()
    return {**run.started.logger.latest, **summary}


def take_step(run: LoopedRun) -> dict[str, float]:
    """One RL step and what it changes in the ``TrainState``: the step count and the policy
    version its optimizer steps reached; then its samples, logged at the new step. Returns its
    metrics."""
    result = run.trainer.run_step()
    state = run.started.state
    state.step += 1
    state.policy_version = result.policy_version
    if result.samples is not None:
        run.log_samples("samples/rollout", result.samples)
    return result.metrics


def evaluate_pending_step(run: LoopedRun) -> None:
    """Run the evaluation a stop signal abandoned at the resumed step and add it to that step's
    row: greedy, with the weights the checkpoint holds, as the uninterrupted run evaluated
    them. Abandoned again by a signal, it stays pending in the checkpoint."""
    state = run.started.state
    evaluation = run.eval_metrics()
    if not evaluation:
        return
    run.started.logger.amend(state.step, evaluation)
    state.eval_pending = False
    run.log_eval_line(run.started.logger.latest)  # the step's row, evaluation included


def _reached(values: dict[str, float] | None) -> str:
    """``{metric: value}`` as ``eval/accuracy 0.935``; another rank's decision: say so."""
    if not values:
        return "on another rank"
    return ", ".join(f"{name} {value:.4g}" for name, value in values.items())
