"""The optimizer steps a run's learning-rate schedules span, and what a resume with another
``trainer.total_steps`` does to them (``ckpt.resume_schedule``).

A schedule built for ``total_steps × ppo_epochs × minibatches`` optimizer steps is a curve over
the run: a 1200-step cosine run ends near lr 0; resumed with ``total_steps=2400`` the same
position is halfway through a curve twice as long, so the lr jumps back up. Both curves are
what some user wants, so the choice is a knob and the start says which one applies:

- ``rescale`` (default, what Hugging Face's Trainer does with a larger ``max_steps``): the
  schedules span the new total; the lr at the resumed step moves to the new curve's value.
- ``keep``: the schedules keep the curve of the total they were built for; past its end the
  lr stays at the curve's last value (cosine: ``min_lr_ratio × lr``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from astrai.training.optim import constant

if TYPE_CHECKING:
    from astrai.training.build import BuiltRun

SchedulerFactory = Callable[..., Any]  # (optimizer, total_steps=...) -> an LR scheduler


@dataclass(frozen=True)
class ScheduleSpan:
    """``steps``: the optimizer steps the schedules span; ``notice``: the one WARNING line a
    resume with another ``trainer.total_steps`` logs (None otherwise), logged by the caller once
    the checkpoint is accepted."""

    steps: int
    notice: str | None = None


def resumed_schedule_steps(
    cfg: DictConfig,
    saved: Mapping[str, Any] | None,
    steps_per_rl_step: int,
    make_scheduler: SchedulerFactory,
) -> ScheduleSpan:
    """The optimizer steps the schedules span: ``trainer.total_steps × steps_per_rl_step`` for
    a fresh run; for a resume (``saved``: the checkpoint's ``trainer_state.json``) the same
    unless ``trainer.total_steps`` changed, then per ``ckpt.resume_schedule``, with a notice
    saying which curve applies and the lr multiplier at the resumed position before and
    after."""
    wanted = int(cfg.trainer.total_steps) * steps_per_rl_step
    if saved is None:
        return ScheduleSpan(wanted)
    saved_total = int(saved["total_steps"]) if "total_steps" in saved else None
    built_for = saved.get("schedule_steps")
    if not isinstance(built_for, int):  # written before schedule_steps was saved
        built_for = wanted if saved_total is None else saved_total * steps_per_rl_step
    if saved_total is None or saved_total == int(cfg.trainer.total_steps):
        return ScheduleSpan(built_for)  # the curve the run has followed so far (kept or not)
    position = int(saved.get("policy_version", 0))
    keep = cfg.ckpt.resume_schedule == "keep"
    chosen = built_for if keep else wanted
    before = _lr_factor(make_scheduler, built_for, position)
    after = _lr_factor(make_scheduler, chosen, position)
    change = "" if before is None or after is None else f"; lr × {before:.4g} → × {after:.4g}"
    moved = f"trainer.total_steps {saved_total} → {cfg.trainer.total_steps} since the checkpoint"
    if keep:
        notice = (
            f"{moved}: the learning-rate schedules keep the curve they were built for "
            f"({built_for} optimizer steps; ckpt.resume_schedule=keep){change}"
        )
    else:
        notice = (
            f"{moved}: the learning-rate schedules are rescaled to {wanted} optimizer steps at "
            f"step {int(saved.get('step', 0))}{change} (ckpt.resume_schedule=keep keeps the old "
            "curve)"
        )
    return ScheduleSpan(chosen, notice)


def _lr_factor(make_scheduler: SchedulerFactory, total: int, position: int) -> float | None:
    """The lr multiplier a schedule over ``total`` optimizer steps gives at ``position``; None
    for a scheduler that is no ``LambdaLR`` (its curve is not a function to evaluate)."""
    probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    scheduler = make_scheduler(probe, total_steps=total)
    if not isinstance(scheduler, LambdaLR):
        return None
    return float(scheduler.lr_lambdas[0](position))


def build_schedulers(parts: BuiltRun, steps: int) -> tuple[LRScheduler, LRScheduler | None]:
    """The policy's schedule over ``steps`` optimizer steps, and the critic's: its own peak
    learning rate (``critic.optimizer.lr``) and the policy's schedule shape
    (``train_type.scheduler``: warmup, decay), as in verl and OpenRLHF."""
    scheduler = parts.strategy.scheduler(parts.optimizer, total_steps=steps)
    if parts.critic_optimizer is None:
        return scheduler, None
    node = parts.cfg.critic.scheduler
    make_critic_scheduler = constant if node is None else instantiate(node)
    return scheduler, make_critic_scheduler(parts.critic_optimizer, total_steps=steps)
