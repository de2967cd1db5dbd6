"""The run's ``RunLogger`` as ``cfg.logger`` selects it: ``metrics.jsonl`` and ``summary.json``
always, TensorBoard when ``logger.tensorboard``, and a sink for each of ``logger.wandb`` and
``logger.mlflow`` that is set (``logger=[tensorboard,wandb,mlflow]``). A sink's package is
imported only here, only when selected (``config.logger_checks`` found it installed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from astrai.metrics.writers import MetricSink, RunLogger


def open_sinks(cfg: DictConfig, run_dir: Path, resuming: bool) -> list[MetricSink]:
    """The selected W&B and MLflow sinks, given the resolved config; ``resuming``: a resume
    from a checkpoint, which continues their stored runs."""
    config = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    sinks: list[MetricSink] = []
    if cfg.logger.get("wandb") is not None:
        from astrai.metrics.wandb_sink import WandbSink

        sinks.append(WandbSink(cfg.logger.wandb, config, run_dir, resuming))
    if cfg.logger.get("mlflow") is not None:
        from astrai.metrics.mlflow_sink import MlflowSink

        sinks.append(MlflowSink(cfg.logger.mlflow, config, run_dir, resuming))
    return sinks


def open_run_logger(
    cfg: DictConfig, run_dir: Path, resume_step: int | None, enabled: bool
) -> RunLogger:
    """``RunLogger`` of ``cfg.logger`` (see ``RunLogger`` for ``resume_step`` and ``enabled``);
    no sink on a rank that does not log."""
    resuming = resume_step is not None and resume_step >= 0
    return RunLogger(
        run_dir,
        cfg.logger.tensorboard,
        cfg.logger.flush_secs,
        resume_step=resume_step,
        enabled=enabled,
        sinks=open_sinks(cfg, run_dir, resuming) if enabled else (),
    )
