"""Learning-rate schedules (Hydra ``_partial_`` targets), gradient clipping and one clipped
optimizer step.

Each receives the optimizer and the run's total number of optimizer steps
(``trainer.total_steps × ppo_epochs × minibatches``) from the trainer; the other arguments
come from ``conf/scheduler/`` and have no defaults here (one home per knob).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from astrai.distributed import as_dtensor


def _check(warmup_steps: int, min_lr_ratio: float = 0.0) -> None:
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0 (got {warmup_steps})")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1] (got {min_lr_ratio})")


def constant(optimizer: torch.optim.Optimizer, total_steps: int) -> LambdaLR:
    """The base learning rate at every step (``critic.scheduler=null``)."""
    return LambdaLR(optimizer, lambda step: 1.0)


def warmup_constant(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int
) -> LambdaLR:
    """Linear warmup over ``warmup_steps`` optimizer steps, then the base learning rate."""
    _check(warmup_steps)

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0

    return LambdaLR(optimizer, factor)


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int,
    min_lr_ratio: float,
) -> LambdaLR:
    """Linear warmup, then cosine decay to ``min_lr_ratio × lr`` at ``total_steps``."""
    _check(warmup_steps, min_lr_ratio)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def clip_gradients(model: nn.Module, max_norm: float) -> Tensor:
    """Clip ``model``'s gradients to ``max_norm`` (global norm); returns the norm before
    clipping (the global one under FSDP, as a plain tensor; NaN or inf when a gradient is not
    finite, which ``training.nonfinite`` checks before any optimizer step)."""
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    dtensor = as_dtensor(grad_norm)  # FSDP: the global norm, as a DTensor
    return grad_norm if dtensor is None else dtensor.full_tensor()


def clip_and_step(model: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float) -> Tensor:
    """Clip ``model``'s gradients to ``max_norm`` (global norm), step ``optimizer``, clear the
    gradients; returns the norm before clipping (``clip_gradients``). Unguarded: the trainer
    steps through ``training.nonfinite.NonFiniteGuard``."""
    grad_norm = clip_gradients(model, max_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm
