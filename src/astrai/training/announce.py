"""What a run records and says as it starts: the TensorBoard dashboards (custom-scalars layout,
HParams record), the warning for GPU settings no visible GPU can honour, and the start banner
(``astrai.training.banner`` formats it; this module gathers the facts from the trainer)."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from torch import nn

from astrai.config.devices import CUDA_VISIBLE_DEVICES, DevicePlan
from astrai.config.validate import plan_here
from astrai.metrics.dashboards import (
    HPARAM_METRICS,
    hparams_start_summaries,
    layout_summary,
    run_hparams,
)
from astrai.metrics.names import emitted_metrics
from astrai.training.banner import RunFacts, cpu_reason, format_banner, ignored_gpu_warning

if TYPE_CHECKING:
    from astrai.training.trainer import Trainer

log = logging.getLogger("astrai.training.trainer")  # the trainer's lines, one logger name


def count_parameters(module: nn.Module) -> int:
    """Parameters of ``module``; a tied weight (embedding = LM head) counts once."""
    return sum(parameter.numel() for parameter in module.parameters())


def write_dashboards(trainer: Trainer) -> None:
    """Custom-scalars layout and HParams record (the job's overrides and key knobs) into the
    run's own event files; written at every start, TensorBoard keeps the first."""
    emitted = emitted_metrics(trainer.strategy.name, trainer.cfg.train_type)
    hparams = run_hparams(trainer.cfg, trainer.job_overrides, trainer.job_choices)
    metrics = [name for name in HPARAM_METRICS if name in emitted]
    summaries = [layout_summary(emitted), *hparams_start_summaries(hparams, metrics)]
    trainer.logger.log_summaries(trainer.step, summaries)


def announce_run(trainer: Trainer) -> None:
    """Rank 0, once per run: the warning for GPU settings no visible GPU can honour
    (``banner.ignored_gpu_warning``), then the start banner, to the console and
    ``train.log``."""
    if not trainer.dist.is_main:
        return
    plan = plan_here(trainer.cfg.infra, "worker")
    warning = ignored_gpu_warning(trainer.cfg.infra, plan, trainer.job_overrides)
    if warning is not None:
        log.warning(warning)
    for line in format_banner(run_facts(trainer, plan)):
        log.info(line)


def run_facts(trainer: Trainer, plan: DevicePlan) -> RunFacts:
    """What the start banner says about this run; ``plan``: this process's device plan."""
    cfg = trainer.cfg
    nnodes = max(int(cfg.infra.nnodes), 1)
    local_processes = max(trainer.dist.world_size // nnodes, 1)
    local_devices = tuple(plan.local_devices or ())[:local_processes]
    if trainer.device.type == "cuda" and not local_devices:
        local_devices = (trainer.device.index or 0,)
    model, reward = trainer.job_choices.get("model"), trainer.job_choices.get("reward")
    return RunFacts(
        run_dir=str(trainer.run_dir),
        train_type=trainer.strategy.name,
        task=trainer.task.name,
        train_file=str(cfg.task.train_path) if "train_path" in cfg.task else None,
        reward=None if reward is None else str(reward),
        reward_terms=trainer.reward.names,
        model=None if model is None else str(model),
        policy_parameters=trainer.parameter_counts[0],
        critic_parameters=trainer.parameter_counts[1],
        device=trainer.device.type,
        local_devices=local_devices if trainer.device.type == "cuda" else (),
        processes=trainer.dist.world_size,
        nnodes=nnodes,
        parallel=str(cfg.infra.parallel),
        cpu_reason=cpu_reason(cfg.infra, plan),
        cuda_visible_devices=os.environ.get(CUDA_VISIBLE_DEVICES),
        total_steps=int(cfg.trainer.total_steps),
        start_step=trainer.step,
        tensorboard=bool(cfg.logger.tensorboard),
    )
