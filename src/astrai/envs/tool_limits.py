"""A tool or an environment step run within limits, so a hung, crashing or flooding one costs
its episode, never the run (issue 50, part 5; verl PR #6673: a degenerate sample froze the
driver for hours).

``run_limited`` runs a callable in a daemon worker thread and waits at most ``timeout_s``.
Python cannot kill a thread: a call that never returns is abandoned (its thread left to the
interpreter's exit, which does not wait for daemon threads) and reported as a timeout. Its
exception becomes an error; a result longer than ``max_chars`` is cut and flagged. The caller
turns an error or timeout into a tool error message the policy sees, or masks the episode,
and counts it (``env/tool_errors``, ``env/timeouts``). An environment's own calls run in its
host (``envs.hosts``: a worker process a timeout kills, or a thread by choice), whose outcomes
are ``Limited`` too, with the failure's ``kind``; ``run_limited`` stays for what an environment
runs within limits itself (a tool).

A stop abandons a thread's waits (``abandon_steps_of``): the sampling thread of an overlapped
run (``training.sampling.overlap``), waiting on a hung step when the run stops, raises
``StepsAbandoned`` within ``WAIT_SLICE_S`` and ends, rather than being left behind to go on
playing its episodes after the run has ended (what ``abandon_reward_calls`` is to a reward
call).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakSet

from astrai.signal_handlers import WAIT_SLICE_S

_abandoned: WeakSet[threading.Thread] = WeakSet()
_abandoned_lock = threading.Lock()


class StepsAbandoned(BaseException):  # noqa: N818 (a decision, not an error)
    """The waiting thread's environment steps were abandoned (``abandon_steps_of``). A
    ``BaseException``, as ``RewardCallAbandoned``: no episode's ``except Exception`` keeps it."""


def abandon_steps_of(thread: threading.Thread) -> None:
    """End ``thread``'s waits for environment steps, this one and any later: they raise
    ``StepsAbandoned`` within ``WAIT_SLICE_S``. The waiting thread kills the worker processes
    of the steps it waited on (``envs.hosts``); steps in threads are left to finish or to the
    interpreter's exit. Safe from any thread."""
    with _abandoned_lock:
        _abandoned.add(thread)


def check_abandoned() -> None:
    """Raise ``StepsAbandoned`` when this thread's steps were abandoned (``abandon_steps_of``);
    what every wait for a step calls at least each ``WAIT_SLICE_S``."""
    with _abandoned_lock:
        abandoned = threading.current_thread() in _abandoned
    if abandoned:
        raise StepsAbandoned("the environment steps were abandoned (the run stopped)")


# what a failed call's ``Limited.kind`` may be: it raised; it ran past its time; its worker
# process died under it; it never reached the user's code (arguments that cannot be sent to a
# worker process, a slot with no environment: ``envs.hosts``)
FAILURE_KINDS = ("raised", "timeout", "died", "unsent")


@dataclass(frozen=True)
class Limited:
    """What a limited call gave: ``value`` (its result; its text cut to ``max_chars`` when it
    was a string), or ``error`` (one line: the exception, or the timeout); ``timed_out`` and
    ``cut`` say which limit acted, ``kind`` which failure it was (None: none; else one of
    ``FAILURE_KINDS``, or a cause the exception declared: ``host_worker.failure_cause``, so a
    caller can count failures by cause)."""

    value: Any = None
    error: str | None = None
    timed_out: bool = False
    cut: bool = False
    seconds: float = field(default=0.0, compare=False)  # how long it ran (timed out: its limit)
    kind: str | None = field(default=None, compare=False)  # derived from the rest: not compared


def _started(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[threading.Thread, dict]:
    """``fn(*args)`` started in a daemon thread; the box its value or error lands in."""
    box: dict[str, Any] = {}

    def work() -> None:
        start = time.perf_counter()
        try:
            box["value"] = fn(*args)
        except BaseException as err:  # noqa: BLE001 (whatever a user's tool raises)
            box["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        box["seconds"] = time.perf_counter() - start

    worker = threading.Thread(target=work, name="astrai-env-call", daemon=True)
    worker.start()
    return worker, box


def _outcome(
    worker: threading.Thread,
    box: dict,
    timeout_s: float,
    max_chars: int | None,
    wait_s: float | None = None,
) -> Limited:
    """What a started call gave within its ``timeout_s``, waiting for it ``wait_s`` more
    seconds (default ``timeout_s``: it started now)."""
    deadline = time.monotonic() + (timeout_s if wait_s is None else wait_s)
    while worker.is_alive() and (left := deadline - time.monotonic()) > 0:
        check_abandoned()
        worker.join(min(WAIT_SLICE_S, left))
    if worker.is_alive():
        return Limited(
            error=f"timed out after {timeout_s:g} s",
            timed_out=True,
            seconds=timeout_s,
            kind="timeout",
        )
    seconds = box["seconds"]
    if "error" in box:
        return Limited(error=box["error"].rstrip(": "), seconds=seconds, kind="raised")
    value = box.get("value")
    if max_chars is not None:
        text = value if isinstance(value, str) else str(value)
        if len(text) > max_chars:
            return Limited(value=text[:max_chars], cut=True, seconds=seconds)
    return Limited(value=value, seconds=seconds)


def run_limited(
    fn: Callable[..., Any], *args: Any, timeout_s: float, max_chars: int | None = None
) -> Limited:
    """``fn(*args)`` in a daemon thread, within ``timeout_s`` seconds and ``max_chars``
    characters of result text (``str(result)`` when it is not a string)."""
    worker, box = _started(fn, args)
    return _outcome(worker, box, timeout_s, max_chars)


def run_all_limited(
    calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...], float]], max_concurrency: int
) -> list[Limited]:
    """Each ``(fn, args, timeout_s)`` of ``calls`` as ``run_limited`` runs it, at most
    ``max_concurrency`` at once (in waves, each call timed from its own start); results in
    order. Only daemon threads: a call that never returns never holds the process's exit, and
    the waits are interruptible (a stop signal raises in the waiting thread; an abandoned
    thread raises ``StepsAbandoned``)."""
    check_abandoned()
    results: list[Limited] = []
    for start in range(0, len(calls), max(1, max_concurrency)):
        wave = calls[start : start + max(1, max_concurrency)]
        started = [(_started(fn, args), timeout, time.monotonic()) for fn, args, timeout in wave]
        for (worker, box), timeout, began in started:
            left = timeout - (time.monotonic() - began)
            results.append(_outcome(worker, box, timeout, None, wait_s=left))
    return results
