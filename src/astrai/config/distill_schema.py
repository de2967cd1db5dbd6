"""The typed schema of distillation's keys: the top-level ``teacher`` node and the ``distill``
group (``conf/distill/``); ``config.schema`` holds the rest of the root's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING


@dataclass
class TeacherConfig:
    """``teacher``: the frozen model(s) a strategy that requires a ``teacher`` or a run with
    ``distill=opd`` scores with (``training.roles``, ``training.distillation``); a top-level
    key, not a group: one kind of teacher, found by its path."""

    path: str | None = MISSING  # an HF model dir, an astrai checkpoint or run dir; null: none
    # several teachers (distill=opd only): name -> path, each row's named by task.teacher_key
    # (untyped: OmegaConf cannot merge a mapping given on the command line into a typed null
    # dict node; distill_checks checks it is one of names to paths)
    paths: Any = MISSING
    dtype: str = MISSING  # the teachers' weights: float32 | bfloat16 | float16
    offload: bool = MISSING  # on the training device for its scoring pass only


@dataclass
class DistillConfig:
    """``distill=none``: no on-policy distillation."""

    name: str = MISSING


@dataclass
class OPDConfig(DistillConfig):
    """``distill=opd``: the teacher's judgement of the sampled tokens trains the policy
    (``algorithms.distillation``, ``docs/distillation.md``)."""

    estimator: str = MISSING  # k1 (a per-token reward) | k3 | forward_topk (direct losses)
    coef: float = MISSING
    topk: int = MISSING  # forward_topk's k
    use_task_reward: bool = MISSING  # false: distillation alone; true: added to the task's
    discount: float | None = MISSING  # k1: reward-to-go with this γ; null: each token its own
    log_prob_min_clamp: float | None = MISSING
    loss_max_clamp: float | None = MISSING
    engine: str = MISSING  # what scores the teacher: torch
