"""What a run records and says as it starts: the TensorBoard dashboards (custom-scalars layout,
HParams record), the warning for GPU settings no visible GPU can honour, and the start banner
(``astrai.training.banner`` formats it; this module gathers the facts from the trainer)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

import torch
from omegaconf import DictConfig
from torch import nn

from astrai.algorithms.strategy import Strategy
from astrai.config.devices import CUDA_VISIBLE_DEVICES, DevicePlan
from astrai.config.env_checks import configured_env
from astrai.config.validate import plan_here
from astrai.distributed import DistContext
from astrai.metrics.dashboards import (
    hparams_start_summary,
    layout_summary,
    run_hparams,
)
from astrai.metrics.names import emitted_metrics
from astrai.metrics.writers import RunLogger
from astrai.rewards.base import Reward
from astrai.rollout.engine import engine_class
from astrai.tasks.base import Problem, ProblemSource
from astrai.training.banner import (
    EnvFacts,
    RunFacts,
    cpu_reason,
    describe_schedule,
    format_banner,
    ignored_gpu_warning,
)
from astrai.training.plan import StepPlan
from astrai.training.state import TrainState

log = logging.getLogger("astrai.training.trainer")  # the trainer's lines, one logger name


def count_parameters(module: nn.Module) -> int:
    """Parameters of ``module``; a tied weight (embedding = LM head) counts once."""
    return sum(parameter.numel() for parameter in module.parameters())


class StartingRun(Protocol):
    """What the dashboards and the banner read of a run (``Trainer``)."""

    cfg: DictConfig
    run_dir: Path
    dist: DistContext
    device: torch.device
    job_overrides: list[str]
    job_choices: dict[str, object]
    strategy: Strategy
    task: ProblemSource
    eval_problems: list[Problem]
    reward: Reward
    parameter_counts: tuple[int, int | None]
    adapter_counts: tuple[int, int | None] | None
    logger: RunLogger
    state: TrainState
    plan: StepPlan


def write_dashboards(trainer: StartingRun) -> None:
    """Custom-scalars layout and HParams record (the job's overrides and key knobs) into the
    run's own event files; written at every start, TensorBoard keeps the first."""
    engine = trainer.cfg.get("engine")
    own_weights = not engine_class(engine).samples_live_policy
    emitted = emitted_metrics(
        trainer.strategy.metric_names,
        trainer.cfg.train_type,
        engine,
        own_weights,
        trainer.cfg.infra.precision,
        trainer.cfg.get("env"),
    )
    hparams = run_hparams(trainer.cfg, trainer.job_overrides, trainer.job_choices)
    summaries = [layout_summary(emitted), hparams_start_summary(hparams)]
    trainer.logger.log_summaries(trainer.state.step, summaries)


def announce_run(trainer: StartingRun) -> None:
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


def run_facts(trainer: StartingRun, plan: DevicePlan) -> RunFacts:
    """What the start banner says about this run; ``plan``: this process's device plan."""
    cfg = trainer.cfg
    nnodes = max(int(cfg.infra.nnodes), 1)
    local_processes = max(trainer.dist.world_size // nnodes, 1)
    local_devices = tuple(plan.local_devices or ())[:local_processes]
    if trainer.device.type == "cuda" and not local_devices:
        local_devices = (trainer.device.index or 0,)
    model, reward = trainer.job_choices.get("model"), trainer.job_choices.get("reward")
    has_critic = "critic" in trainer.strategy.requires
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
        start_step=trainer.state.step,
        tensorboard=bool(cfg.logger.tensorboard),
        learning_rate=float(cfg.train_type.optimizer.lr),
        critic_learning_rate=float(cfg.critic.optimizer.lr) if has_critic else None,
        schedule=describe_schedule(cfg.train_type.scheduler, trainer.state.schedule_steps),
        critic_schedule=critic_schedule(cfg) if has_critic else None,
        adapters=describe_adapters(cfg, trainer.adapter_counts),
        max_new_tokens=int(trainer.strategy.sampling.max_new_tokens),
        prompt_counts=task_prompt_counts(trainer.task),
        evaluated_prompts=len(trainer.eval_problems),
        policy_lag=trainer.plan.lag_facts(),  # the lag and the correction it chose
        env=env_facts(cfg),
    )


def env_facts(cfg: DictConfig) -> EnvFacts | None:
    """The banner's ``env:`` line of a run with an environment (its ``EnvSpec``, validated
    at start); None for ``env=single_turn``."""
    spec = configured_env(cfg.get("env"))
    if spec is None:
        return None
    return EnvFacts(
        target=spec.target,
        parser=spec.parser,
        max_turns=spec.limits.max_turns,
        max_episode_tokens=spec.limits.max_episode_tokens,
        step_timeout_s=spec.limits.step_timeout_s,
        workers=spec.workers,
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
