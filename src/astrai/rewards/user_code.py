"""Calling a user's reward code: whatever it throws becomes an error astrai can name, and
``reward.timeout_s`` bounds how long one call may take.

User code is user code: besides ``Exception`` it may call ``sys.exit()``, raise
``KeyboardInterrupt`` or ``GeneratorExit``. None of those may end a run silently (``sys.exit()``
would exit 0 with no checkpoint, no summary and no message), so the reward layer catches them
too. ``python train.py`` turns a real Ctrl-C into a stop request (``catch_stop_signals``), never
into ``KeyboardInterrupt``, so one that comes out of a reward is the reward's own. astrai's own
``StopInterrupt`` (a stop signal or the time budget abandoning the work,
``astrai.training.stopping``) is a ``BaseException`` that is none of these: it passes through.

With a timeout the call runs in a daemon thread that the caller waits for with a timed join; a
call still running at the timeout is left behind (Python cannot stop a thread) and the caller
gets ``CallTimeout``. Without one it runs in the calling thread, as before: math-verify's own
SIGALRM timeouts work only in the main thread (``astrai.rewards.math``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# what a reward may throw besides ``Exception`` (``StopInterrupt`` is not among them)
USER_EXITS: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt, GeneratorExit)
USER_ERRORS: tuple[type[BaseException], ...] = (Exception, *USER_EXITS)


class CallTimeout(Exception):
    """A user call did not return within its timeout; it goes on in a daemon thread."""


def call_user(fn: Callable[[], T], timeout_s: float | None) -> T:
    """``fn()``; with ``timeout_s``, in a daemon thread waited for up to that many seconds
    (``CallTimeout`` after it). Whatever ``fn`` raises is raised here, in the caller's thread."""
    if timeout_s is None:
        return fn()
    outcome: list[tuple[bool, object]] = []

    def target() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as err:  # noqa: BLE001 (handed to the caller, which decides)
            outcome.append((False, err))

    # daemon: a call that never returns must not keep the process alive at exit
    thread = threading.Thread(target=target, name="astrai-reward-call", daemon=True)
    thread.start()
    # a timed join wakes for signals (a stop request, the time budget), unlike a blocked call
    thread.join(timeout_s)
    if thread.is_alive() or not outcome:
        raise CallTimeout(f"no return within {timeout_s:g}s")
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]  # fn's own result


def describe_failure(err: BaseException) -> str:
    """What a reward did, for a ``RewardError`` line: ``called sys.exit(3)``, ``raised
    KeyboardInterrupt``, ``failed`` (an ordinary exception, whose message follows)."""
    if isinstance(err, SystemExit):
        return f"called sys.exit({'' if err.code is None else repr(err.code)})"
    if isinstance(err, USER_EXITS):
        return f"raised {type(err).__name__}"
    return "failed"
