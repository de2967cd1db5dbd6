"""``build_reward``: the ``reward`` config node (a plain mapping) -> the run's ``Reward``.

Each term is imported and built here, in the trainer, so that a bad config fails at start with one
line naming the key; a term that runs in a reward worker (all but the ``inline`` ones,
``astrai.rewards.base``) keeps its node, and the worker builds it again from it
(``build_term``).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

from astrai.imports import import_target
from astrai.rewards.base import (
    PROMPT_CONTEXT,
    RUN_KEYS,
    WHOLE_REWARD_KEYS,
    Reward,
    RewardConfigError,
    RewardFn,
    RewardTerm,
    context_keywords,
    default_name,
)
from astrai.rewards.user_code import USER_EXITS, describe_failure

DEFAULT_TIMEOUT_SCORE = 0.0


def build_reward(node: Mapping[str, Any]) -> Reward:
    """The ``reward`` config node (a plain mapping) -> the run's ``Reward``."""
    threshold = node.get("accuracy_threshold")
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not math.isfinite(threshold)
    ):
        raise RewardConfigError(
            f"reward.accuracy_threshold must be a finite number, got {threshold!r}"
        )
    if node.get("terms") is not None:
        terms_node = node["terms"]
        if not isinstance(terms_node, list) or not terms_node:
            raise RewardConfigError("reward.terms must be a non-empty list of reward nodes")
        terms = [build_term(t, f"reward.terms[{i}]") for i, t in enumerate(terms_node)]
    else:
        terms = [build_term(node, "reward", weight=1.0)]
    names = [term.name for term in terms]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RewardConfigError(f"reward.terms: names must differ, {repeated} repeat")
    timeout_score = node.get("timeout_score", DEFAULT_TIMEOUT_SCORE)
    if (
        isinstance(timeout_score, bool)
        or not isinstance(timeout_score, int | float)
        or not math.isfinite(timeout_score)
    ):
        raise RewardConfigError(
            f"reward.timeout_score must be a finite number, got {timeout_score!r}"
        )
    return Reward(
        terms,
        float(threshold),
        _timeout(node.get("timeout_s")),
        float(timeout_score),
        term_builder=build_term,
    )


def _timeout(value: Any) -> float | None:
    """``reward.timeout_s``: null, or a finite number of seconds > 0."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise RewardConfigError(
            f"reward.timeout_s must be null or a number of seconds > 0, got {value!r}"
        )
    return float(value)


def build_term(node: Any, where: str, weight: float | None = None) -> RewardTerm:
    """One term from its node (``where``: its place in the config, for errors; ``weight``:
    the term's weight, None = the node's ``weight`` key, as under ``terms``). It runs in a reward
    worker unless its class or function sets ``inline = True``."""
    given = weight
    if not isinstance(node, Mapping):
        raise RewardConfigError(f"{where}: expected a reward node with _target_, got {node!r}")
    if weight is None:  # a term of ``terms``
        misplaced = [k for k in WHOLE_REWARD_KEYS if k in node]
        if misplaced:
            raise RewardConfigError(
                f"{where}.{misplaced[0]}: set it on the reward node (reward.{misplaced[0]}), "
                "not on a term"
            )
    target = node.get("_target_")
    if not isinstance(target, str) or not target:
        raise RewardConfigError(f"{where}._target_: name the reward (module.function)")
    kwargs = {k: v for k, v in node.items() if k not in RUN_KEYS}
    if weight is None:
        weight = node.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise RewardConfigError(f"{where}.weight must be a number, got {weight!r}")
        if not math.isfinite(weight):
            raise RewardConfigError(f"{where}.weight must be finite, got {weight!r}")
    obj = _import(target, where)
    passed = [k for k in PROMPT_CONTEXT if k in kwargs and not isinstance(obj, type)]
    if passed:
        raise RewardConfigError(
            f"{where}.{passed[0]}: astrai passes {passed[0]} to the reward on every call (the "
            "prompt the policy answered); name the key otherwise"
        )
    try:
        fn = obj(**kwargs) if isinstance(obj, type) else _bind(obj, kwargs)
    except (TypeError, ValueError) as err:
        raise RewardConfigError(f"{where} ({target}): {err}") from err
    except USER_EXITS as err:  # a constructor is user code too (other errors: the caller's)
        raise RewardConfigError(
            f"{where} ({target}): its constructor {describe_failure(err)}"
        ) from err
    takes = context_keywords(fn)
    try:
        inspect.signature(fn).bind([], [], [], **{k: [] for k in takes})
    except (TypeError, ValueError) as err:
        raise RewardConfigError(
            f"{where}._target_: {target} must be callable as fn(prompts, responses, answers) "
            f"({err})"
        ) from err
    name = node.get("name") or default_name(target)
    if getattr(obj, "inline", False) is True:  # it stays in this process (a reward model)
        return RewardTerm(name, float(weight), fn)
    return RewardTerm(name, float(weight), fn, remote=(dict(node), where, given))


def _import(target: str, where: str) -> Any:
    """``module.attribute`` -> the callable; one line naming the key when it cannot be had."""
    obj = import_target(target, f"{where}._target_", error=RewardConfigError)
    if not callable(obj):
        raise RewardConfigError(f"{where}._target_: {target} is not callable")
    return obj


def _bind(fn: Callable[..., Any], kwargs: dict[str, Any]) -> RewardFn:
    if not kwargs:
        return fn
    inspect.signature(fn).bind_partial(**kwargs)  # TypeError naming an unknown key
    return functools.partial(fn, **kwargs)
