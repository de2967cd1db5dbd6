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
``reward/<name>``.

Where a term runs: a term built from the config runs in a reward worker process
(``astrai.rewards.worker``), one per calling thread, so that a call that does not return can be
killed. A term whose class or function sets ``inline = True`` (the reward model: it holds a
torch module on the training device) runs in the calling thread instead, unbounded, as do the
terms of a ``Reward`` built in Python from ``RewardTerm`` objects (no config node to rebuild them
from).

A term that raises (``sys.exit()`` included: ``astrai.rewards.user_code``), returns the wrong
number of scores or a value that is not a finite float32 stops the run with one ``RewardError``
line naming the term and the prompt. A worker term's call that runs past ``reward.timeout_s``
(seconds one call of a term on one batch may take) costs the answers it cannot score, not the
run: the worker is killed and replaced, the batch is scored again row by row, each row bounded
by ``timeout_s``, and a row that still does not return (or kills its worker) scores
``reward.timeout_score``, is logged as a warning naming the term, the prompt and the timeout,
and is counted (``Reward.take_timeouts``, logged as ``rollout/reward_timeouts``).
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from astrai.rewards.scores import RewardError, check_scores, finite32
from astrai.rewards.user_code import USER_ERRORS, describe_failure
from astrai.rewards.worker import (
    CallTimeout,
    Reply,
    RewardWorker,
    TermBuilder,
    TermSpec,
    WorkerStartFailed,
)

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

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
    "timeout_score",
)
# run keys of the whole reward (``astrai.rewards.config.overlong_from_config``): on the
# top-level node only, refused on a term of ``terms``
OVERLONG_KEYS = ("overlong_buffer", "overlong_penalty")
WHOLE_REWARD_KEYS = (*OVERLONG_KEYS, "timeout_s", "timeout_score")
# what a reward gets as keyword arguments when it asks for them, one entry per response like
# the three lists: ``messages`` (list[list[dict]]: every {role, content} turn the policy
# answered, system turn included) and ``rendered_prompts`` (list[str]: the prompt's text as the
# policy's tokenizer rendered it, chat template and generation prompt included)
PROMPT_CONTEXT = ("messages", "rendered_prompts")
# astrai's own reward modules (a forkserver preloads them whatever happens)
BUILTIN_PREFIX = "astrai.rewards."


class RewardConfigError(ValueError):
    """A ``reward`` config that cannot be built; the message names the key."""


@dataclass(frozen=True)
class RewardTerm:
    """A named, weighted term; ``remote``: how a reward worker builds it again (its config
    node, where it sits in the config, its weight argument), None = it runs inline."""

    name: str
    weight: float
    fn: RewardFn
    remote: tuple[dict[str, Any], str, float | None] | None = field(
        default=None, compare=False, hash=False, repr=False
    )


class Reward:
    """A weighted sum of named reward terms; ``accuracy_threshold``: a response whose total
    reaches it counts as correct (``rollout/accuracy``, ``eval/accuracy``); ``timeout_s``: the
    seconds one call of a worker term on one batch may take (None = no bound);
    ``timeout_score``: what a response whose score did not return within it scores."""

    def __init__(
        self,
        terms: list[RewardTerm],
        accuracy_threshold: float,
        timeout_s: float | None = None,
        timeout_score: float = 0.0,
        term_builder: TermBuilder | None = None,
    ) -> None:
        self.terms = terms
        self.accuracy_threshold = accuracy_threshold
        self.timeout_s = timeout_s
        self.timeout_score = timeout_score
        # False: a batch call past timeout_s is a RewardError, not re-scored row by row (the
        # pre-run check: its answers are the references and empty ones, which a working
        # reward scores at once; a run would otherwise start on a reward that never returns)
        self.rescore_rows = True
        # the PROMPT_CONTEXT keywords each term's signature asks for, read once
        self.term_takes = {t.name: context_keywords(t.fn) for t in terms}
        self._specs: list[TermSpec] = [(t.name, *t.remote) for t in terms if t.remote is not None]
        if self._specs and term_builder is None:
            raise ValueError("terms with a config node (remote) need term_builder to rebuild them")
        # how a worker builds the terms again (``astrai.rewards.build.build_term``)
        self._build = term_builder
        # the terms' modules, imported once by the worker's forkserver (the trainer imported
        # them already, so they import); astrai's own alone if that server cannot start
        self._preload = sorted({str(s[1]["_target_"]).rpartition(".")[0] for s in self._specs})
        self._local = threading.local()  # this thread's worker and timeout count
        self._workers: list[RewardWorker] = []  # every thread's, for close()
        self._workers_lock = threading.Lock()
        weakref.finalize(self, _close_workers, self._workers)

    @property
    def names(self) -> list[str]:
        return [term.name for term in self.terms]

    @property
    def takes(self) -> tuple[str, ...]:
        """The ``PROMPT_CONTEXT`` keywords some term asks for: what a caller must pass."""
        return tuple(k for k in PROMPT_CONTEXT if any(k in t for t in self.term_takes.values()))

    def to(self, device: torch.device) -> Reward:
        """Move inline terms that hold a model (``reward=model``) to ``device``."""
        for term in self.terms:
            move = getattr(term.fn, "to", None)
            if term.remote is None and callable(move):
                move(device)
        return self

    def close(self) -> None:
        """Kill this reward's workers (a call waiting on one raises ``RewardCallAbandoned``);
        a later call starts a fresh one. Idempotent."""
        with self._workers_lock:
            workers = list(self._workers)
            self._workers.clear()
        for worker in workers:
            worker.abandon()

    def take_timeouts(self) -> int:
        """The responses this thread scored ``timeout_score`` since the last take; resets."""
        count: int = getattr(self._local, "timeouts", 0)
        self._local.timeouts = 0
        return count

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
        rows = Rows(prompts, responses, answers)
        per_term = {
            t.name: self._term_scores(t, rows, {k: context[k] for k in self.term_takes[t.name]})
            for t in self.terms
        }
        totals = [0.0] * len(responses)
        for term in self.terms:
            for i, value in enumerate(per_term[term.name]):
                totals[i] += term.weight * value
        for prompt, total in zip(prompts, totals, strict=True):
            if not finite32(total):
                raise RewardError(f"reward total {total} is not a finite float32 on {prompt!r}")
        return totals, per_term

    def correct(self, totals: list[float]) -> list[bool]:
        return [total >= self.accuracy_threshold for total in totals]

    def _term_scores(self, term: RewardTerm, rows: Rows, context: dict[str, Any]) -> list[float]:
        if term.remote is None:
            return _inline_scores(term, rows, context)
        try:
            reply = self._call(term.name, rows, context, self.timeout_s)
        except CallTimeout as why:
            if not self.rescore_rows:
                raise RewardError(
                    f"reward {term.name} did not return on {len(rows)} answers ({why}; first "
                    f"prompt {rows.prompts[0] if len(rows) else ''!r})"
                ) from None
            if len(rows) == 1:
                return [self._timed_out(term, rows.prompts[0], why)]
            return self._rescore_rows(term, rows, context)
        return self._scores(term, reply, rows, context)

    def _builder(self) -> TermBuilder:
        assert self._build is not None  # checked in __init__: there are specs
        return self._build

    def _call(
        self, name: str, rows: Rows, context: dict[str, Any], timeout_s: float | None
    ) -> Reply:
        """One call of term ``name`` on ``rows`` in this thread's worker (started if needed)."""
        worker: RewardWorker | None = getattr(self._local, "worker", None)
        if worker is None or worker.dead or worker.abandoned:  # abandoned while idle: replaced
            if worker is not None:
                worker.close()
            try:
                worker = RewardWorker(self._specs, self._builder(), self._preload)
            except (OSError, EOFError):  # a forkserver that died preloading a user's module
                self._preload = [m for m in self._preload if m.startswith(BUILTIN_PREFIX)]
                worker = RewardWorker(self._specs, self._builder(), self._preload)
            self._local.worker = worker
            with self._workers_lock:
                self._workers[:] = [w for w in self._workers if not w.dead] + [worker]
        try:
            return worker.call((name, rows.lists(), context), timeout_s)
        except WorkerStartFailed as err:
            raise RewardError(f"reward {name}: {err}") from None

    def _scores(
        self, term: RewardTerm, reply: Reply, rows: Rows, context: dict[str, Any]
    ) -> list[float]:
        """A worker's reply as scores, or the ``RewardError`` it means."""
        kind = reply[0]
        if kind == "ok":
            scores: list[float] = reply[1]
            return scores
        if kind == "invalid":
            raise RewardError(reply[1])
        if kind == "unbuilt":
            raise RewardError(
                f"reward {term.name} cannot be built in the reward worker: {reply[1]}"
            )
        what, message = reply[1], reply[2]
        prompt = rows.prompts[0] if len(rows) == 1 else self._first_failing(term, rows, context)
        detail = f": {message}" if what == "failed" else ""
        raise RewardError(f"reward {term.name} {what} on prompt {prompt!r}{detail}")

    def _rescore_rows(self, term: RewardTerm, rows: Rows, context: dict[str, Any]) -> list[float]:
        """After a batch call that did not return: each row alone, each within ``timeout_s``;
        a row that does not return scores ``timeout_score``."""
        scores: list[float] = []
        for i in range(len(rows)):
            row, row_context = rows.row(i), _row_context(context, i)
            try:
                reply = self._call(term.name, row, row_context, self.timeout_s)
            except CallTimeout as why:
                scores.append(self._timed_out(term, row.prompts[0], why))
                continue
            scores.extend(self._scores(term, reply, row, row_context))
        return scores

    def _timed_out(self, term: RewardTerm, prompt: str, why: CallTimeout) -> float:
        self._local.timeouts = getattr(self._local, "timeouts", 0) + 1
        log.warning(
            "reward %s did not return on prompt %r (%s): scored reward.timeout_score=%g",
            term.name,
            prompt,
            why,
            self.timeout_score,
        )
        return self.timeout_score

    def _first_failing(self, term: RewardTerm, rows: Rows, context: dict[str, Any]) -> str:
        """The first prompt whose row alone makes the term raise (a batch error names no row);
        the batch's first prompt when none does. With ``timeout_s`` the search as a whole
        gets that long (a row that does not return counts as failing), not that long per
        row."""
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        for i in range(len(rows)):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            try:
                reply = self._call(term.name, rows.row(i), _row_context(context, i), left)
            except CallTimeout:
                return rows.prompts[i]
            if reply[0] == "raised":
                return rows.prompts[i]
        return rows.prompts[0] if len(rows) else ""


@dataclass(frozen=True)
class Rows:
    """The three parallel lists of one scoring call."""

    prompts: list[str]
    responses: list[str]
    answers: list[str | None]

    def __len__(self) -> int:
        return len(self.responses)

    def lists(self) -> tuple[list[str], list[str], list[str | None]]:
        return self.prompts, self.responses, self.answers

    def row(self, i: int) -> Rows:
        return Rows([self.prompts[i]], [self.responses[i]], [self.answers[i]])


def _row_context(context: dict[str, Any], i: int) -> dict[str, Any]:
    return {key: [values[i]] for key, values in context.items()}


def _close_workers(workers: list[RewardWorker]) -> None:
    for worker in list(workers):
        worker.abandon()


def _inline_scores(term: RewardTerm, rows: Rows, context: dict[str, Any]) -> list[float]:
    """An inline term, called in this thread (no bound: it cannot be killed)."""
    try:
        # list(): a generator's items are the reward's code too, run under the same guard
        values = list(term.fn(*rows.lists(), **context))
    except USER_ERRORS as err:
        prompt = rows.prompts[0] if rows.prompts else ""
        for i in range(len(rows)):  # the first row that raises alone (a batch names no row)
            try:
                term.fn(*rows.row(i).lists(), **_row_context(context, i))
            except USER_ERRORS:
                prompt = rows.prompts[i]
                break
        what = describe_failure(err)
        detail = f": {err}" if what == "failed" else ""
        raise RewardError(f"reward {term.name} {what} on prompt {prompt!r}{detail}") from err
    return check_scores(term.name, rows.prompts, rows.responses, values)


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
