"""The run on top: build → start or resume → the loop → close, the one lifecycle of a training
run (``fit``), used by ``python train.py`` and by every rank of a multi-process launch alike.

``Run`` holds what a run is made of: ``parts`` (``build_run``: the models, optimizers,
strategy, task, reward), ``started`` (``loop.start_run``: the ``TrainState``, fresh or resumed,
the schedules, the engine, the rollout source, the logger), its step (``trainer``: collect,
prepare, update, evaluate) and its checkpoint writes. The loop (``training.loop.run_loop``)
drives it; ``Run.fit`` is the loop's one caller.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from astrai.distributed import all_reduce_max
from astrai.files import naming_write_errors
from astrai.training.announce import announce_run, prompt_count_summary, write_dashboards
from astrai.training.background_save import CheckpointWrites
from astrai.training.banner import format_eval_line
from astrai.training.build import BuiltRun, JobContext, build_run
from astrai.training.checkpointing import settled_state
from astrai.training.loop import RunStart, run_loop, start_run, take_step
from astrai.training.nonfinite import check_finite_weights
from astrai.training.stopping import StopInterrupt, deferred_stop, interruptible
from astrai.training.trainer import Trainer

log = logging.getLogger("astrai.training.trainer")  # the run's lines, one logger name


def fit(
    cfg: DictConfig, run_dir: str | Path, job_context: JobContext | None = None
) -> dict[str, object]:
    """Build, start (or resume, as ``ckpt.resume`` says), train and close the run of a validated
    ``cfg`` in ``run_dir``; returns the summary also written to ``summary.json`` (rank 0's: the
    other ranks' carry their own view). ``job_context``: the Hydra job's overrides and group
    choices (default: the current job's; an elastic worker gets its launcher's)."""
    run = Run(cfg, run_dir, job_context)  # start-up: a stop signal ends it at once
    try:
        with deferred_stop():  # not cut half-way
            run.save_config()
        return run.fit()
    finally:
        run.close()


class Run:
    """A built and started run (``Run(cfg, run_dir)``: built, resumed or fresh, its engine and
    rollout source started) and what it does between the steps: evaluations, logging,
    checkpoints, the close. ``fit`` runs its loop."""

    def __init__(
        self, cfg: DictConfig, run_dir: str | Path, job_context: JobContext | None = None
    ) -> None:
        self.parts: BuiltRun = build_run(cfg, run_dir, job_context)
        self.started: RunStart = start_run(self.parts)
        self.trainer = Trainer(self.parts, self.started)
        self.checkpoint_writes = CheckpointWrites()  # at most one written in the background

    def fit(self, until: int | None = None) -> dict[str, object]:
        """Train up to ``trainer.total_steps`` (or ``until``, if smaller), checkpointing on
        schedule, on SIGTERM/SIGINT, when ``trainer.max_duration`` is spent and at the end
        (``training.loop``). Returns the summary also written to ``summary.json``; ``stopped``
        says why a run ended before ``total_steps`` (None when it completed)."""
        return run_loop(self, until)

    def train_step(self) -> dict[str, float]:
        """One RL step, the state advanced by the loop (``loop.take_step``); its metrics."""
        return take_step(self)

    def announce(self) -> None:
        """The TensorBoard dashboards, then (rank 0) the start banner (``announce``)."""
        write_dashboards(self.parts, self.started)
        announce_run(self.parts, self.started)

    def eval_metrics(self) -> dict[str, float]:
        """The evaluation's metrics; {} when a stop signal abandoned it (one process: an
        evaluation changes no training state)."""
        t0 = time.perf_counter()
        try:
            with interruptible(self.parts.dist.world_size == 1):
                result = self.trainer.evaluate()
        except StopInterrupt:
            return {}
        self.log_samples("samples/eval", result.samples)
        return {**result.metrics(), "time/eval_s": time.perf_counter() - t0}

    def log_samples(self, tag: str, rows: list[tuple[str, str, float]]) -> None:
        """``logger.num_samples`` of ``rows`` (prompt, response, reward) at this step."""
        count = self.parts.cfg.logger.num_samples
        self.started.logger.log_samples(self.started.state.step, tag, rows[:count])

    def log_eval_line(self, metrics: dict[str, float]) -> None:
        """Rank 0: one INFO line per evaluation, so ``train.log`` grows as the run goes."""
        if self.parts.dist.is_main:
            total = self.parts.cfg.trainer.total_steps
            log.info(format_eval_line(self.started.state.step, total, metrics))

    def prompt_counts(self) -> dict[str, object]:
        """The task's prompt counts, for ``summary.json`` (``prompt_count_summary``)."""
        return prompt_count_summary(self.parts.task, len(self.parts.eval_problems))

    def save_checkpoint(self, background: bool = False) -> Path:
        """Write ``checkpoints/step_<step>/`` atomically, then prune beyond ``ckpt.keep_last``;
        returns its path. ``background`` (with ``ckpt.background``): returns once the state is
        copied to host memory, and a thread writes it (``training.background_save``);
        ``wait_for_checkpoint`` waits for that write and raises its failure. Weights that are
        not finite are refused (``training.nonfinite``), every rank alike, before any write."""
        self.checkpoint_writes.wait()  # the previous write's failure before anything else
        parts, state = self.parts, self.started.state
        models = {"policy": parts.policy, "critic": parts.critic}
        check_finite_weights(models, f"step_{state.step}", all_reduce_max)
        pipeline = self.started.rollouts.pipeline
        if pipeline is not None:  # the rollouts sampled for the next steps go with it
            state = settled_state(state, pipeline.settle(), pipeline.stream)
        saved = parts.checkpointed_objects(self.started.scheduler, self.started.critic_scheduler)
        background = background and bool(parts.cfg.ckpt.get("background", False))
        return self.checkpoint_writes.save(saved, state, background)

    def wait_for_checkpoint(self) -> None:
        """The background write, if any, complete on disk (its failure raised on every rank)."""
        self.checkpoint_writes.wait()

    def save_config(self) -> None:
        """Rank 0: the resolved config as ``config.yaml`` in the run dir."""
        if not self.parts.dist.is_main:
            return
        path = self.parts.run_dir / "config.yaml"
        with naming_write_errors(path):  # a full disk names the file
            path.write_text(OmegaConf.to_yaml(self.parts.cfg, resolve=True))

    def close(self) -> None:
        """Free what the run holds beyond its memory (a checkpoint being written finished first,
        the engine, reward workers); idempotent."""
        self.checkpoint_writes.close()
        self.started.rollouts.close()
        self.started.engine.close()
        self.parts.reward.close()  # its worker processes (astrai.rewards.worker)
