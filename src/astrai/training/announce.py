"""What a run records and says as it starts: the TensorBoard dashboards (custom-scalars layout,
HParams record), the warning for GPU settings no visible GPU can honour, and the start banner
(``astrai.training.banner`` formats it; this module gathers the facts from the trainer)."""

from __future__ import annotations

import logging
import os

from omegaconf import DictConfig

from astrai.config.devices import CUDA_VISIBLE_DEVICES, DevicePlan
from astrai.config.distill_checks import distill_metric_names
from astrai.config.validate import plan_here
from astrai.metrics.dashboards import (
    hparams_start_summary,
    layout_summary,
    run_hparams,
)
from astrai.metrics.names import emitted_metrics
from astrai.rollout.engines.engine import engine_class
from astrai.tasks.base import ProblemSource
from astrai.training.banner import (
    RunFacts,
    cpu_reason,
    describe_schedule,
    format_banner,
    ignored_gpu_warning,
)
from astrai.training.build import BuiltRun
from astrai.training.loop import RunStart

log = logging.getLogger("astrai.training.trainer")  # the trainer's lines, one logger name


def write_dashboards(parts: BuiltRun, started: RunStart) -> None:
    """Custom-scalars layout and HParams record (the job's overrides and key knobs) into the
    run's own event files; written at every start, TensorBoard keeps the first."""
    engine = parts.cfg.get("engine")
    own_weights = not engine_class(engine).samples_live_policy
    emitted = emitted_metrics(
        parts.strategy.metric_names,
        parts.cfg.train_type,
        started.plan.lag,
        own_weights,
        parts.collector.episodes,
        distill_metric_names(parts.cfg),
    )
    hparams = run_hparams(parts.cfg, parts.job_overrides, parts.job_choices)
    summaries = [layout_summary(emitted), hparams_start_summary(hparams)]
    started.logger.log_summaries(started.state.step, summaries)


def announce_run(parts: BuiltRun, started: RunStart) -> None:
    """Rank 0, once per run: the warning for GPU settings no visible GPU can honour
    (``banner.ignored_gpu_warning``), then the start banner, to the console and
    ``train.log``."""
    if not parts.dist.is_main:
        return
    plan = plan_here(parts.cfg.infra, "worker")
    warning = ignored_gpu_warning(parts.cfg.infra, plan, parts.job_overrides)
    if warning is not None:
        log.warning(warning)
    lines = format_banner(run_facts(parts, started, plan))
    if parts.distiller is not None:  # after the task line: what trains the policy besides it
        lines.insert(4, f"  {parts.distiller.describe()}")
    for line in lines:
        log.info(line)


def run_facts(parts: BuiltRun, started: RunStart, plan: DevicePlan) -> RunFacts:
    """What the start banner says about this run; ``plan``: this process's device plan."""
    cfg = parts.cfg
    nnodes = max(int(cfg.infra.nnodes), 1)
    local_processes = max(parts.dist.world_size // nnodes, 1)
    local_devices = tuple(plan.local_devices or ())[:local_processes]
    if parts.device.type == "cuda" and not local_devices:
        local_devices = (parts.device.index or 0,)
    model, reward = parts.job_choices.get("model"), parts.job_choices.get("reward")
    has_critic = "critic" in parts.strategy.requires
    return RunFacts(
        run_dir=str(parts.run_dir),
        train_type=parts.strategy.name,
        task=parts.task.name,
        train_file=str(cfg.task.train_path) if "train_path" in cfg.task else None,
        reward=None if reward is None else str(reward),
        reward_terms=parts.reward.names,
        model=None if model is None else str(model),
        policy_parameters=parts.parameter_counts[0],
        critic_parameters=parts.parameter_counts[1],
        device=parts.device.type,
        local_devices=local_devices if parts.device.type == "cuda" else (),
        processes=parts.dist.world_size,
        nnodes=nnodes,
        parallel=str(cfg.infra.parallel),
        cpu_reason=cpu_reason(cfg.infra, plan),
        cuda_visible_devices=os.environ.get(CUDA_VISIBLE_DEVICES),
        total_steps=int(cfg.trainer.total_steps),
        start_step=started.state.step,
        tensorboard=bool(cfg.logger.tensorboard),
        learning_rate=float(cfg.train_type.optimizer.lr),
        critic_learning_rate=float(cfg.critic.optimizer.lr) if has_critic else None,
        schedule=describe_schedule(cfg.train_type.scheduler, started.state.schedule_steps),
        critic_schedule=critic_schedule(cfg) if has_critic else None,
        adapters=describe_adapters(cfg, parts.adapter_counts),
        max_new_tokens=int(parts.strategy.sampling.max_new_tokens),
        prompt_counts=task_prompt_counts(parts.task),
        evaluated_prompts=len(parts.eval_problems),
        policy_lag=started.plan.lag_facts(),  # the lag and the correction it chose
        collector=parts.collector.facts(),
    )


def task_prompt_counts(task: ProblemSource) -> tuple[int, int, bool] | None:
    """The task's ``(train prompts, held-out prompts, exact)`` (its ``split_sizes``: the
    embedded tasks' and ``task=dataset``'s); None for a task without it."""
    split_sizes = getattr(task, "split_sizes", None)
    return split_sizes() if callable(split_sizes) else None


def prompt_count_summary(task: ProblemSource, evaluated: int) -> dict[str, object]:
    """``summary.json``'s prompt counts: ``train_prompts`` and ``eval_prompts`` (the task's
    held-out pool; absent for a task that does not say), ``prompt_counts_exact`` (False: an
    estimate of a generated task's space), ``evaluated_prompts`` (what each evaluation
    decodes: ``eval/*`` rests on these many prompts)."""
    counts = task_prompt_counts(task)
    if counts is None:
        return {"evaluated_prompts": evaluated}
    train, held_out, exact = counts
    return {
        "train_prompts": train,
        "eval_prompts": held_out,
        "prompt_counts_exact": exact,
        "evaluated_prompts": evaluated,
    }


def describe_adapters(cfg: DictConfig, counts: tuple[int, int | None] | None) -> str | None:
    """``LoRA rank 16 (all-linear): 1,234 trainable (critic 1,235)``; None without adapters."""
    if counts is None:
        return None
    lora = cfg.model.lora
    targets = lora.target_modules
    where = targets if isinstance(targets, str) else ",".join(str(t) for t in targets)
    text = f"LoRA rank {lora.rank} ({where}): {counts[0]:,} trainable"
    return text if counts[1] is None else f"{text} (critic {counts[1]:,})"


def critic_schedule(cfg: DictConfig) -> str:
    """The critic's schedule in words: ``the policy's`` (the default, an interpolation of it),
    ``constant`` (null) or its own."""
    scheduler = cfg.critic.scheduler
    if scheduler is None:
        return "constant"
    if scheduler == cfg.train_type.scheduler:
        return "the policy's"
    return describe_schedule(scheduler)
