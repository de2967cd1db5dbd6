"""How a ``reward`` config becomes the scorer of a run, and the checks on what a reward returns.

A reward is any batched callable ``fn(prompts, responses, answers) -> list[float]`` (parallel
lists, one entry per sampled response; ``prompts`` holds each prompt's last user turn). A reward
that names ``messages`` or ``rendered_prompts`` among its keyword parameters, or takes
``**kwargs``, also gets those (``PROMPT_CONTEXT``), as TRL passes a dataset's extra columns to its
reward functions: the whole conversation the policy answered, and its text as the policy's
tokenizer rendered it. The ``reward`` config node names one with ``_target_``
(a function, or a class whose instance is that callable, built from the node's other keys), or
several under ``terms`` with weights. Either way the run scores with a ``Reward``: a weighted sum
of named terms (one term of weight 1 for a single reward), each term also logged on its own as
``reward/<name>``. A term that raises (``sys.exit()`` included: ``astrai.rewards.user_code``),
returns the wrong number of scores or a value that is not a finite float32, or that runs past
``reward.timeout_s``, stops the run with one ``RewardError`` line naming the term and the prompt.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from astrai.rewards.user_code import (
    USER_ERRORS,
    USER_EXITS,
    CallTimeout,
    call_user,
    describe_failure,
)

RewardFn = Callable[[list[str], list[str], list[str | None]], list[float]]
# keys of a reward node that configure the run's use of it, not the callable itself
RUN_KEYS = (
    "_target_",
    "name",
    "weight",
    "accuracy_threshold",
    "terms",
    "overlong_buffer",
    "overlong_penalty",
    "timeout_s",
)
# run keys of the whole reward (``astrai.rewards.config.overlong_from_config``): on the
# top-level node only, refused on a term of ``terms``
OVERLONG_KEYS = ("overlong_buffer", "overlong_penalty")
WHOLE_REWARD_KEYS = (*OVERLONG_KEYS, "timeout_s")
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
# what a reward gets as keyword arguments when it asks for them, one entry per response like
# the three lists: ``messages`` (list[list[dict]]: every {role, content} turn the policy
# answered, system turn included) and ``rendered_prompts`` (list[str]: the prompt's text as the
# policy's tokenizer rendered it, chat template and generation prompt included)
PROMPT_CONTEXT = ("messages", "rendered_prompts")


class RewardError(RuntimeError):
    """A reward raised, or returned the wrong count or a non-finite value; names the prompt."""


class RewardConfigError(ValueError):
    """A ``reward`` config that cannot be built; the message names the key."""


@dataclass(frozen=True)
class RewardTerm:
    name: str
    weight: float
    fn: RewardFn


class Reward:
    """A weighted sum of named reward terms; ``accuracy_threshold``: a response whose total
    reaches it counts as correct (``rollout/accuracy``, ``eval/accuracy``); ``timeout_s``: the
    seconds each term's call may take (None = no bound; ``astrai.rewards.user_code``)."""

    def __init__(
        self,
        terms: list[RewardTerm],
        accuracy_threshold: float,
        timeout_s: float | None = None,
    ) -> None:
        self.terms = terms
        self.accuracy_threshold = accuracy_threshold
        self.timeout_s = timeout_s
        # the PROMPT_CONTEXT keywords each term's signature asks for, read once
        self.term_takes = {t.name: context_keywords(t.fn) for t in terms}

    @property
    def names(self) -> list[str]:
        return [term.name for term in self.terms]

    @property
    def takes(self) -> tuple[str, ...]:
        """The ``PROMPT_CONTEXT`` keywords some term asks for: what a caller must pass."""
        return tuple(k for k in PROMPT_CONTEXT if any(k in t for t in self.term_takes.values()))

    def to(self, device: torch.device) -> Reward:
        """Move terms that hold a model (``reward=model``) to ``device``."""
        for term in self.terms:
            move = getattr(term.fn, "to", None)
            if callable(move):
                move(device)
        return self

    def score(
        self,
        prompts: list[str],
        responses: list[str],
        answers: list[str | None],
        messages: list[list[dict[str, str]]] | None = None,
        rendered_prompts: list[str] | None = None,
    ) -> tuple[list[float], dict[str, list[float]]]:
        """Totals and each term's scores, one per response; ``RewardError`` on a bad term.

        ``messages`` and ``rendered_prompts`` (one per response) reach the terms that ask for
        them; a caller must pass each one some term ``takes`` (ValueError otherwise)."""
        context = {"messages": messages, "rendered_prompts": rendered_prompts}
        for key in self.takes:
            given = context[key]
            if given is None or len(given) != len(responses):
                raise ValueError(
                    f"a reward term takes {key}: pass one per response ({len(responses)}), "
                    f"got {'none' if given is None else len(given)}"
                )
        per_term = {
            t.name: self._term_scores(
                t, prompts, responses, answers, {k: context[k] for k in self.term_takes[t.name]}
            )
            for t in self.terms
        }
        totals = [0.0] * len(responses)
        for term in self.terms:
            for i, value in enumerate(per_term[term.name]):
                totals[i] += term.weight * value
        for prompt, total in zip(prompts, totals, strict=True):
            if not _finite32(total):
                raise RewardError(f"reward total {total} is not a finite float32 on {prompt!r}")
        return totals, per_term

    def correct(self, totals: list[float]) -> list[bool]:
        return [total >= self.accuracy_threshold for total in totals]

    def _term_scores(
        self,
        term: RewardTerm,
        prompts: list[str],
        responses: list[str],
        answers: list[str | None],
        context: dict[str, Any],
    ) -> list[float]:
        first = prompts[0] if prompts else ""
        try:
            # list(): a generator's items are the reward's code too, run under the same guard
            values = call_user(
                lambda: list(term.fn(prompts, responses, answers, **context)), self.timeout_s
            )
        except CallTimeout:
            raise RewardError(
                f"reward {term.name} did not return within reward.timeout_s={self.timeout_s:g}s "
                f"on a batch of {len(responses)} responses (first prompt {first!r}); the call "
                "is left running in a daemon thread"
            ) from None
        except USER_ERRORS as err:
            prompt = _first_failing(term.fn, prompts, responses, answers, context, self.timeout_s)
            what = describe_failure(err)
            detail = f": {err}" if what == "failed" else ""
            raise RewardError(f"reward {term.name} {what} on prompt {prompt!r}{detail}") from err
        if len(values) != len(responses):
            raise RewardError(
                f"reward {term.name} returned {len(values)} scores for {len(responses)} "
                f"responses (first prompt {prompts[0] if prompts else ''!r})"
            )
        scores = []
        for prompt, value in zip(prompts, values, strict=True):
            try:
                score = float(value)
            except USER_ERRORS:  # OverflowError: an int past float; or a user __float__
                score = math.nan
            if not _finite32(score):
                raise RewardError(
                    f"reward {term.name} returned {value!r} (not a finite float32) on prompt "
                    f"{prompt!r}"
                )
            scores.append(score)
        return scores


def _finite32(value: float) -> bool:
    return math.isfinite(value) and abs(value) <= FLOAT32_MAX


def _first_failing(
    fn: RewardFn,
    prompts: list[str],
    responses: list[str],
    answers: list[str | None],
    context: dict[str, Any],
    timeout_s: float | None = None,
) -> str:
    """The first prompt whose pair alone (with its ``context`` entries) makes ``fn`` raise (a
    batch error names no row); the first prompt of the batch when none does. With
    ``timeout_s`` the search as a whole gets that long (a row that times out counts as
    failing), not that long per row."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    rows = zip(prompts, responses, answers, strict=True)
    for i, (prompt, response, answer) in enumerate(rows):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        row = {key: [values[i]] for key, values in context.items()}
        try:
            call_user(functools.partial(fn, [prompt], [response], [answer], **row), left)
        except USER_ERRORS:  # CallTimeout included: that row does not return
            return prompt
    return prompts[0] if prompts else ""


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
        terms = [_build_term(t, f"reward.terms[{i}]") for i, t in enumerate(terms_node)]
    else:
        terms = [_build_term(node, "reward", weight=1.0)]
    names = [term.name for term in terms]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RewardConfigError(f"reward.terms: names must differ, {repeated} repeat")
    return Reward(terms, float(threshold), _timeout(node.get("timeout_s")))


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


def _build_term(node: Any, where: str, weight: float | None = None) -> RewardTerm:
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
    return RewardTerm(node.get("name") or default_name(target), float(weight), fn)


def context_keywords(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The ``PROMPT_CONTEXT`` keywords ``fn`` takes: those it names as keyword parameters
    beyond its first three positional ones (which receive the three lists whatever their
    names), or all of them when it takes ``**kwargs`` (TRL's convention). A reward written as
    ``fn(prompts, responses, answers)`` takes none and is called exactly as before."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read: the three lists only
        return ()
    kinds = inspect.Parameter
    if any(p.kind is kinds.VAR_KEYWORD for p in params.values()):
        return PROMPT_CONTEXT
    positional = [
        n
        for n, p in params.items()
        if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    keyword = (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)
    return tuple(
        k
        for k in PROMPT_CONTEXT
        if k in params and params[k].kind in keyword and k not in positional[:3]
    )


def default_name(target: str) -> str:
    """A term's name from its ``_target_``: snake case, without a ``_reward`` suffix
    (``pkg.math_reward`` -> ``math``, ``pkg.RegexMatch`` -> ``regex_match``)."""
    last = target.rsplit(".", 1)[-1]
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", last).lower()
    return snake.removesuffix("_reward") or snake


def _import(target: str, where: str) -> Any:
    """``module.attribute`` -> the object; one line naming the key when it cannot be had."""
    module_name, _, attribute = target.rpartition(".")
    if not module_name:
        raise RewardConfigError(f"{where}._target_: {target!r} is no module.function path")
    try:
        module = importlib.import_module(module_name)
    except USER_ERRORS as err:  # the user's module may fail in any way while importing
        raise RewardConfigError(
            f"{where}._target_: cannot import {module_name!r} ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''})"
        ) from err
    obj = getattr(module, attribute, None)
    if obj is None:
        raise RewardConfigError(f"{where}._target_: {module_name!r} has no {attribute!r}")
    if not callable(obj):
        raise RewardConfigError(f"{where}._target_: {target} is not callable")
    return obj


def _bind(fn: Callable[..., Any], kwargs: dict[str, Any]) -> RewardFn:
    if not kwargs:
        return fn
    inspect.signature(fn).bind_partial(**kwargs)  # TypeError naming an unknown key
    return functools.partial(fn, **kwargs)
