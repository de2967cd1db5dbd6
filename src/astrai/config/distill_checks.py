"""``distill=opd`` at the door: each key's range, and the combinations with the algorithm and
the task that cannot mean what they say, refused in one line naming the key (as verl's
validator refuses ``k1`` without a policy-gradient path; in astrai every algorithm has one).

The teachers themselves (loadable, the policy's vocabulary) are ``config.role_checks``'.
"""

from __future__ import annotations

import math

from omegaconf import DictConfig

from astrai.algorithms.distillation import DISTILL_ESTIMATORS, LOSS_ESTIMATORS
from astrai.config.errors import require
from astrai.config.role_checks import distilling
from astrai.config.train_type_checks import strategy_class_of
from astrai.metrics.names import distill_metrics
from astrai.models.precision import DTYPES

DISTILL_ENGINES = ("torch",)


def distill_metric_names(cfg: DictConfig) -> frozenset[str]:
    """The ``distill/*`` metrics (and ``loss/distill``) a run of ``cfg`` emits; none with
    ``distill=none``."""
    if not distilling(cfg):
        return frozenset()
    paths = cfg.teacher.get("paths")
    teachers = [] if paths is None else [str(name) for name in paths]
    return distill_metrics(cfg.distill.estimator, teachers, LOSS_ESTIMATORS)


def validate_distill(cfg: DictConfig, vocab_size: int) -> None:
    """``distill`` and ``teacher``'s own keys against the run (``vocab_size``: the policy's)."""
    teacher = cfg.get("teacher")
    if teacher is not None:
        require(
            teacher.get("dtype", "float32") in DTYPES,
            f"teacher.dtype must be one of {', '.join(DTYPES)} (got {teacher.get('dtype')!r})",
        )
        require(
            isinstance(teacher.get("offload", False), bool),
            f"teacher.offload must be true or false (got {teacher.get('offload')!r})",
        )
    paths = None if teacher is None else teacher.get("paths")
    require(
        paths is None
        or (
            isinstance(paths, DictConfig)
            and len(paths) > 0
            and all(isinstance(v, str) and v for v in paths.values())
        ),
        f"teacher.paths must map each teacher's name to its path, e.g. "
        f"{{add: outputs/add, rev: outputs/rev}} (got {paths!r})",
    )
    task_key = cfg.task.get("teacher_key")
    several = teacher is not None and teacher.get("paths") is not None
    if not distilling(cfg):
        require(
            task_key is None,
            f"task.teacher_key={task_key} names each row's teacher for distill=opd: use "
            "distill=opd with teacher.paths, or leave task.teacher_key null",
        )
        require(
            not several,
            "teacher.paths names several teachers for distill=opd: use distill=opd or leave "
            "teacher.paths null",
        )
        return
    node = cfg.distill
    require(
        node.estimator in DISTILL_ESTIMATORS,
        f"distill.estimator must be one of {', '.join(DISTILL_ESTIMATORS)} "
        f"(got {node.estimator!r})",
    )
    _check_number(node.coef, "distill.coef", positive=True)
    require(
        isinstance(node.topk, int) and 1 <= node.topk <= vocab_size,
        f"distill.topk must be an integer from 1 to the vocabulary's {vocab_size} "
        f"(got {node.topk!r})",
    )
    require(
        isinstance(node.use_task_reward, bool),
        f"distill.use_task_reward must be true or false (got {node.use_task_reward!r})",
    )
    if node.discount is not None:
        _check_number(node.discount, "distill.discount")
        require(
            0 <= node.discount <= 1, f"distill.discount must be in [0, 1] (got {node.discount})"
        )
    if node.log_prob_min_clamp is not None:
        _check_number(node.log_prob_min_clamp, "distill.log_prob_min_clamp")
        require(
            node.log_prob_min_clamp < 0,
            f"distill.log_prob_min_clamp must be below 0 (got {node.log_prob_min_clamp})",
        )
    if node.loss_max_clamp is not None:
        _check_number(node.loss_max_clamp, "distill.loss_max_clamp", positive=True)
    require(
        node.engine in DISTILL_ENGINES,
        f"distill.engine must be one of {', '.join(DISTILL_ENGINES)} (got {node.engine!r}; "
        "a vLLM teacher with prompt_logprobs is not built yet)",
    )
    _check_combinations(cfg, several, task_key)


def _check_combinations(cfg: DictConfig, several: bool, task_key: object) -> None:
    node, train_type = cfg.distill, cfg.train_type
    name = strategy_class_of(train_type).name
    has_critic = "critic" in strategy_class_of(train_type).requires
    loss = node.estimator in LOSS_ESTIMATORS
    require(
        node.discount is None or not loss,
        f"distill.discount makes k1's reward a reward-to-go; distill.estimator={node.estimator} "
        "is a loss with no reward to sum: leave distill.discount null",
    )
    require(
        node.discount is None or not has_critic,
        f"distill.discount: train_type={name} sums the distillation reward through GAE "
        "(train_type.ppo_gamma, ppo_gae_lambda): leave distill.discount null",
    )
    require(
        not (has_critic and loss and not node.use_task_reward),
        f"train_type={name} with distill.estimator={node.estimator} and "
        "distill.use_task_reward=false gives its critic no reward to learn: use "
        "distill.estimator=k1 (the reward through GAE) or distill.use_task_reward=true",
    )
    require(
        node.use_task_reward or not train_type.get("filter_groups", False),
        "train_type.filter_groups drops groups by the task's reward, which "
        "distill.use_task_reward=false leaves out: set distill.use_task_reward=true or "
        "train_type.filter_groups=false",
    )
    if several:
        require(
            task_key is not None,
            "teacher.paths routes each row to a teacher by a column: set task.teacher_key "
            "(task=dataset) to the column naming it",
        )
    else:
        require(
            task_key is None,
            f"task.teacher_key={task_key} routes rows among several teachers: set "
            "teacher.paths (name: path), or leave task.teacher_key null",
        )


def _check_number(value: object, key: str, positive: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = ok and math.isfinite(float(value))  # type: ignore[arg-type]
    if ok and positive:
        ok = float(value) > 0  # type: ignore[arg-type]
    what = "a finite number above 0" if positive else "a finite number"
    require(ok, f"{key} must be {what} (got {value!r})")


def check_routes(cfg: DictConfig, task: object) -> None:
    """Under ``teacher.paths``: every teacher the task's rows name (``task.teacher_key``) is one
    of ``teacher.paths``' names, and every named teacher has rows."""
    teacher = cfg.get("teacher")
    if not distilling(cfg) or teacher is None or teacher.get("paths") is None:
        return
    named = set(getattr(task, "row_teachers", {}).values())
    given = set(teacher.paths)
    missing, unused = sorted(named - given), sorted(given - named)
    require(
        not missing,
        f"task.teacher_key names teacher {missing[0] if missing else ''!r}, not one of "
        f"teacher.paths ({', '.join(sorted(given))})",
    )
    require(
        not unused,
        f"teacher.paths.{unused[0] if unused else ''}: no row of the task names it "
        f"(task.teacher_key={cfg.task.get('teacher_key')})",
    )
