"""The run's schedule around the steps: the step-0 evaluation, a step, an evaluation every
``trainer.eval_every``, logging, checkpoints on schedule and when the run stops (a signal at
any time, ``trainer.max_duration``, metrics reaching ``trainer.stop_at``), the summary. What
one step does is ``Trainer``'s. How soon a stop takes effect (the bound) is
``training.stopping``'s; under ``python train.py`` the budget counts from start-up
(``stopping.job_budget``), for a ``Trainer.fit`` called directly from the loop's start.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Protocol

from omegaconf import DictConfig
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from astrai.algorithms.strategy import Strategy
from astrai.config.duration import parse_duration
from astrai.metrics.dashboards import hparams_end_summary
from astrai.metrics.targets import parse_targets, targets_reached
from astrai.metrics.writers import RunLogger
from astrai.training.state import TrainState
from astrai.training.stopping import StopInterrupt, StopRequest, agreed_stop_reason

log = logging.getLogger(__name__)


class SteppedRun(Protocol):
    """What the loop drives (``Trainer``): its ``state`` is the loop's to read and advance."""

    cfg: DictConfig
    run_dir: Path
    strategy: Strategy
    logger: RunLogger
    state: TrainState

    def announce(self) -> None:
        """The dashboards and the start banner."""

    def train_step(self) -> dict[str, float]:
        """One RL step (``state.step`` advances by one); its metrics."""

    def eval_metrics(self) -> dict[str, float]:
        """The evaluation's metrics; {} when a stop signal abandoned it."""

    def save_checkpoint(self) -> Path:
        """A checkpoint of ``state`` and the trained objects."""

    def log_eval_line(self, metrics: dict[str, float]) -> None:
        """One INFO line per evaluation (rank 0)."""

    def prompt_counts(self) -> dict[str, object]:
        """The task's train and held-out prompt counts, for the summary."""


def run_loop(trainer: SteppedRun, until: int | None = None) -> dict[str, object]:
    """``Trainer.fit``: train up to ``trainer.total_steps`` (or ``until``, if smaller); returns
    the summary also written to ``summary.json``."""
    state = trainer.state
    total = trainer.cfg.trainer.total_steps
    last_step = total if until is None else min(until, total)
    targets = parse_targets(trainer.cfg.trainer.stop_at)  # validated at start
    reached: dict[str, float] | None = None
    budget = trainer.cfg.trainer.max_duration
    start = time.perf_counter()
    elapsed_before = trainer.logger.latest.get("time/elapsed_s", 0.0)  # earlier segments
    trainer.announce()
    saved_step = state.step if state.resumed_from is not None else None
    checkpoint: Path | None = state.resumed_from
    show_bar = bool(trainer.cfg.trainer.progress_bar)
    bar = tqdm(total=total, initial=state.step, disable=not show_bar, desc="astrai")
    # log lines go through tqdm.write while the bar is shown, so they never break it
    console = logging_redirect_tqdm() if show_bar else contextlib.nullcontext()
    budget_s = parse_duration(budget) if budget is not None else None
    with console, StopRequest(budget_s) as stop:
        # the ranks agree before evaluating: under FSDP an evaluation is collectives (weight
        # gathers) that a rank signalled during start-up would leave waiting
        stopped = agreed_stop_reason(stop.signal_name)
        if state.step == 0 and stopped is None:
            state.initial_metrics = trainer.eval_metrics()
            if state.initial_metrics:
                trainer.logger.log(state.step, state.initial_metrics)
                trainer.log_eval_line(state.initial_metrics)
        if state.eval_pending and stopped is None:
            evaluate_pending_step(trainer)
        # a signal during start-up or an evaluation before the first step (or the time budget
        # spent there): none was taken, so the state is the one the run started from (fresh,
        # or the checkpoint resumed)
        stopped = stopped or agreed_stop_reason(stop.reason)
        if stopped is not None:
            log.warning("stopped (%s) before step %d: nothing new to save", stopped, state.step + 1)
        while stopped is None and state.step < last_step:
            try:
                metrics = trainer.train_step()
            except StopInterrupt as interrupt:  # sampling abandoned (``abandonable``): a
                stopped = interrupt.signal_name  # signal, or the time budget (``max_duration``)
                if saved_step != state.step:
                    checkpoint, saved_step = trainer.save_checkpoint(), state.step
                log.warning(
                    "stopped (%s) while sampling step %d: %s",
                    stopped,
                    state.step + 1,
                    checkpoint or "nothing to save",
                )
                break
            evaluated = state.step % trainer.cfg.trainer.eval_every == 0 or state.step == total
            if evaluated:
                evaluation = trainer.eval_metrics()  # {}: a stop signal abandoned it
                metrics.update(evaluation)
                evaluated = bool(evaluation)
                state.eval_pending = not evaluated  # the checkpoint the stop writes says so
            metrics["time/elapsed_s"] = elapsed_before + time.perf_counter() - start
            trainer.logger.log(state.step, metrics)
            if evaluated:
                trainer.log_eval_line(metrics)
            bar.update(1)
            bar.set_postfix(
                reward=f"{metrics['rollout/reward_mean']:.3f}",
                eval_acc=f"{trainer.logger.latest.get('eval/accuracy', float('nan')):.2f}",
                step_s=f"{metrics['perf/step_s']:.2f}",
            )
            if state.step < total:  # the last step ends the run anyway
                reached = targets_reached(targets, metrics, trainer.logger.latest)
            stopped = agreed_stop_reason(stop.reason or ("stop_at" if reached else None))
            if stopped == "stop_at":
                log.info("trainer.stop_at reached at step %d: %s", state.step, _reached(reached))
            every = trainer.cfg.ckpt.every_steps
            if stopped is not None or (every > 0 and state.step % every == 0):
                checkpoint, saved_step = trainer.save_checkpoint(), state.step
                # a stop asked for while it waited on the sampling thread: that checkpoint
                # abandoned the unfinished rollouts (``overlap``), so this is the stop's
                stopped = stopped or agreed_stop_reason(stop.reason)
            if stopped is not None:
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
            checkpoint = trainer.save_checkpoint()
    bar.close()
    summary: dict[str, object] = {
        "step": state.step,
        "wall_time_s": time.perf_counter() - start,
        "initial/eval/accuracy": state.initial_metrics.get("eval/accuracy"),
        "train_type": trainer.strategy.name,
        "run_dir": str(trainer.run_dir),
        "stopped": stopped,
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        **trainer.prompt_counts(),
    }
    if stopped == "stop_at":  # the values that met trainer.stop_at (None on a rank that
        summary["stop_at"] = reached  # stopped because another one reached them)
    if state.step == total:  # HParams status: complete (a stopped run may be resumed)
        trainer.logger.log_summaries(state.step, [hparams_end_summary()])
    trainer.logger.write_summary(summary)
    trainer.logger.close()
    return {**trainer.logger.latest, **summary}


def evaluate_pending_step(trainer: SteppedRun) -> None:
    """Run the evaluation a stop signal abandoned at the resumed step and add it to that step's
    row: greedy, with the weights the checkpoint holds, as the uninterrupted run evaluated
    them. Abandoned again by a signal, it stays pending in the checkpoint."""
    state = trainer.state
    evaluation = trainer.eval_metrics()
    if not evaluation:
        return
    trainer.logger.amend(state.step, evaluation)
    state.eval_pending = False
    trainer.log_eval_line(trainer.logger.latest)  # the step's row, evaluation included


def _reached(values: dict[str, float] | None) -> str:
    """``{metric: value}`` as ``eval/accuracy 0.935``; another rank's decision: say so."""
    if not values:
        return "on another rank"
    return ", ".join(f"{name} {value:.4g}" for name, value in values.items())
