"""The run's schedule around the steps: the step-0 evaluation, a step, an evaluation every
``trainer.eval_every``, logging, checkpoints on schedule and when the run stops (a signal at
any time, ``trainer.max_duration``), the summary. What one step does is ``Trainer``'s.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from astrai.config.duration import parse_duration
from astrai.metrics.dashboards import hparams_end_summary
from astrai.training.announce import announce_run, write_dashboards
from astrai.training.stopping import StopInterrupt, StopRequest, agreed_stop_reason

if TYPE_CHECKING:
    from astrai.training.trainer import Trainer

log = logging.getLogger(__name__)


def run_loop(trainer: Trainer, until: int | None = None) -> dict[str, object]:
    """``Trainer.fit``: train up to ``trainer.total_steps`` (or ``until``, if smaller); returns
    the summary also written to ``summary.json``."""
    total = trainer.cfg.trainer.total_steps
    stop_at = total if until is None else min(until, total)
    budget = trainer.cfg.trainer.max_duration
    start = time.perf_counter()
    elapsed_before = trainer.logger.latest.get("time/elapsed_s", 0.0)  # earlier segments
    write_dashboards(trainer)
    announce_run(trainer)
    saved_step = trainer.step if trainer.resumed_from is not None else None
    checkpoint: Path | None = trainer.resumed_from
    show_bar = bool(trainer.cfg.trainer.progress_bar)
    bar = tqdm(total=total, initial=trainer.step, disable=not show_bar, desc="astrai")
    # log lines go through tqdm.write while the bar is shown, so they never break it
    console = logging_redirect_tqdm() if show_bar else contextlib.nullcontext()
    budget_s = parse_duration(budget) if budget is not None else None
    with console, StopRequest(budget_s) as stop:
        # the ranks agree before evaluating: under FSDP an evaluation is collectives (weight
        # gathers) that a rank signalled during start-up would leave waiting
        stopped = agreed_stop_reason(stop.signal_name)
        if trainer.step == 0 and stopped is None:
            trainer.initial_metrics = trainer.eval_metrics()
            if trainer.initial_metrics:
                trainer.logger.log(trainer.step, trainer.initial_metrics)
                trainer.log_eval_line(trainer.initial_metrics)
        if trainer.eval_pending and stopped is None:
            evaluate_pending_step(trainer)
        # a signal during start-up or an evaluation before the first step (or the time budget
        # spent there): none was taken, so the state is the one the run started from (fresh,
        # or the checkpoint resumed)
        stopped = stopped or agreed_stop_reason(stop.reason)
        if stopped is not None:
            log.warning(
                "stopped (%s) before step %d: nothing new to save", stopped, trainer.step + 1
            )
        while stopped is None and trainer.step < stop_at:
            try:
                metrics = trainer.train_step()
            except StopInterrupt as interrupt:  # sampling abandoned (``abandonable``): a
                stopped = interrupt.signal_name  # signal, or the time budget (``max_duration``)
                if saved_step != trainer.step:
                    checkpoint, saved_step = trainer.save_checkpoint(), trainer.step
                log.warning(
                    "stopped (%s) while sampling step %d: %s",
                    stopped,
                    trainer.step + 1,
                    checkpoint or "nothing to save",
                )
                break
            evaluated = trainer.step % trainer.cfg.trainer.eval_every == 0 or trainer.step == total
            if evaluated:
                evaluation = trainer.eval_metrics()  # {}: a stop signal abandoned it
                metrics.update(evaluation)
                evaluated = bool(evaluation)
                trainer.eval_pending = not evaluated  # the checkpoint the stop writes says so
            metrics["time/elapsed_s"] = elapsed_before + time.perf_counter() - start
            trainer.logger.log(trainer.step, metrics)
            if evaluated:
                trainer.log_eval_line(metrics)
            bar.update(1)
            bar.set_postfix(
                reward=f"{metrics['rollout/reward_mean']:.3f}",
                eval_acc=f"{trainer.logger.latest.get('eval/accuracy', float('nan')):.2f}",
                step_s=f"{metrics['perf/step_s']:.2f}",
            )
            stopped = agreed_stop_reason(stop.reason)
            every = trainer.cfg.ckpt.every_steps
            if stopped is not None or (every > 0 and trainer.step % every == 0):
                checkpoint, saved_step = trainer.save_checkpoint(), trainer.step
            if stopped is not None:
                pending = " (its evaluation, abandoned, runs first on resume)"
                log.warning(
                    "stopped (%s) at step %d: %s%s",
                    stopped,
                    trainer.step,
                    checkpoint,
                    pending if trainer.eval_pending else "",
                )
                break
        if saved_step != trainer.step and trainer.step > 0:  # the end of the run (or ``until``)
            checkpoint = trainer.save_checkpoint()
    bar.close()
    summary: dict[str, object] = {
        "step": trainer.step,
        "wall_time_s": time.perf_counter() - start,
        "initial/eval/accuracy": trainer.initial_metrics.get("eval/accuracy"),
        "train_type": trainer.strategy.name,
        "run_dir": str(trainer.run_dir),
        "stopped": stopped,
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
    }
    if trainer.step == total:  # HParams status: complete (a stopped run may be resumed)
        trainer.logger.log_summaries(trainer.step, [hparams_end_summary()])
    trainer.logger.write_summary(summary)
    trainer.logger.close()
    return {**trainer.logger.latest, **summary}


def evaluate_pending_step(trainer: Trainer) -> None:
    """Run the evaluation a stop signal abandoned at the resumed step and add it to that step's
    row: greedy, with the weights the checkpoint holds, as the uninterrupted run evaluated
    them. Abandoned again by a signal, it stays pending in the checkpoint."""
    evaluation = trainer.eval_metrics()
    if not evaluation:
        return
    trainer.logger.amend(trainer.step, evaluation)
    trainer.eval_pending = False
    trainer.log_eval_line(trainer.logger.latest)  # the step's row, evaluation included
