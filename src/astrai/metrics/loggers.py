"""The run's ``RunLogger`` as ``cfg.logger`` selects it: ``metrics.jsonl`` and ``summary.json``
always, TensorBoard when ``logger.tensorboard``, and a sink for each of ``logger.wandb`` and
``logger.mlflow`` that is set (``logger=[tensorboard,wandb,mlflow]``). A sink's package is
imported only here, only when selected (``config.logger_checks`` found it installed).

The sinks start before anything is written: a resume's ``ResumePoint`` is read first, the sinks
open on it (each continues its stored run, or starts a new one that replays the kept rows), and
only then does ``RunLogger`` cut ``metrics.jsonl`` back to the checkpoint. A sink that cannot
start is a ``LoggerStartError`` and leaves nothing it created behind."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from astrai.metrics.logger_start import LoggerStartError, one_line, remove_paths
from astrai.metrics.writers import MetricSink, ResumePoint, RunLogger, read_resume_point


def open_sinks(cfg: DictConfig, run_dir: Path, resume: ResumePoint | None) -> list[MetricSink]:
    """The selected W&B and MLflow sinks, given the resolved config; ``resume``: where a
    (re)start picks up (None: a fresh run dir).

    Raises:
        LoggerStartError: a sink could not start; the ones opened before it are closed and
            the files and folders they created removed.
    """
    config = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    selected: list[tuple[str, Callable[[], MetricSink], list[Path]]] = []
    # MLflow first: it starts silently, while W&B prints its banner, which would otherwise
    # stand above the one line of an MLflow that then cannot start
    if cfg.logger.get("mlflow") is not None:
        from astrai.metrics import mlflow_sink

        mlflow_settings = cfg.logger.mlflow
        selected.append(
            (
                "mlflow",
                lambda: mlflow_sink.MlflowSink(mlflow_settings, config, run_dir, resume),
                mlflow_sink.created_paths(mlflow_settings, run_dir),
            )
        )
    if cfg.logger.get("wandb") is not None:
        from astrai.metrics import wandb_sink

        wandb_settings = cfg.logger.wandb
        selected.append(
            (
                "wandb",
                lambda: wandb_sink.WandbSink(wandb_settings, config, run_dir, resume),
                wandb_sink.created_paths(wandb_settings, run_dir),
            )
        )
    fresh = [path for _, _, paths in selected for path in paths if not path.exists()]
    sinks: list[MetricSink] = []
    for name, opener, _ in selected:
        try:
            sinks.append(opener())
        except Exception as err:
            for sink in sinks:
                with contextlib.suppress(Exception):
                    sink.close()
            remove_paths(fresh)
            raise LoggerStartError(f"logger={name} cannot start: {one_line(err)}") from err
    return sinks


def open_run_logger(
    cfg: DictConfig, run_dir: Path, resume_step: int | None, enabled: bool
) -> RunLogger:
    """``RunLogger`` of ``cfg.logger`` (see ``RunLogger`` for ``resume_step`` and ``enabled``);
    no sink on a rank that does not log."""
    if not enabled:
        return RunLogger(run_dir, cfg.logger.tensorboard, cfg.logger.flush_secs, enabled=False)
    resume = read_resume_point(run_dir, resume_step) if resume_step is not None else None
    sinks = open_sinks(cfg, run_dir, resume)
    try:
        return RunLogger(
            run_dir,
            cfg.logger.tensorboard,
            cfg.logger.flush_secs,
            resume_step=resume_step,
            sinks=sinks,
            resume=resume,
        )
    except BaseException:
        for sink in sinks:
            with contextlib.suppress(Exception):
                sink.close()
        raise
