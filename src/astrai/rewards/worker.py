"""The reward worker: a process that runs reward terms where a hard timeout can end them.

Python cannot stop a thread, and C code that holds the GIL (SymPy's big-integer arithmetic on
``$9^{9^{9^{9}}}$``, a regex that backtracks catastrophically) cannot even be interrupted by a
signal. So the terms a ``Reward`` builds from its config run in a worker process, one per
calling thread of the trainer (the main thread, and the sampling thread under a policy lag),
started lazily from a ``forkserver`` (the trainer has threads: a plain fork could copy a held
lock; a forkserver child forks from a clean single-threaded server that preloaded astrai's reward
modules and the terms' own, which the trainer imported already, so a start costs milliseconds:
``bench/reward_boundary.py``; one server per set of modules, each exiting with the trainer:
``astrai.forkserver_process``, shared with the environment hosts).
The worker gets the reward's term nodes (plain data) plus the parent's ``sys.path`` and working
directory, builds the terms itself, and calls them in its main thread, where math-verify's own
SIGALRM timeouts work. One call = one term on one whole batch (one round trip per term per
batch). A stateful term's state lives in its worker (a killed worker's is gone).

The parent waits on the worker's pipe in short slices, so a stop signal's handler in the main
thread can raise there at once; anything raised while waiting (``StopInterrupt`` included)
kills the worker and propagates. A call past its timeout kills the worker (SIGKILL) and the
caller gets ``CallTimeout``; the next call starts a fresh worker. ``abandon_reward_calls()``
kills every worker of this process: a thread blocked in a call raises ``RewardCallAbandoned``
at once (its pipe closes). A worker exits on EOF of its pipe, dies with its forkserver (which
exits with the trainer, a ``kill -9`` included: no orphan) and is killed at ``Reward.close()``
and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

# imported before ``atexit.register`` below: multiprocessing's exit handler (which joins
# children) is registered first, so ours runs before it
from astrai.forkserver_process import ForkserverProcess, die_with_parent, sigkill
from astrai.rewards.scores import RewardError, check_scores
from astrai.rewards.user_code import describe_failure

log = logging.getLogger(__name__)

POLL_S = 0.2  # the longest a waiting caller goes without looking at its worker or a signal
# imported once by a forkserver, so that a worker's start costs a fork; the modules of a
# reward's built-in targets are added to these (``RewardWorker``), with what they import lazily
PRELOAD = ("astrai.rewards.worker", "astrai.rewards.build", "astrai.rewards.builtin")
LAZY_IMPORTS = {"astrai.rewards.similarity": ("torchmetrics.functional.text",)}
READY = ("ready",)  # a worker's first message: it started and built its terms (or failed to)

# (term name, reward node, where in the config, weight or None for a term of ``terms``)
TermSpec = tuple[str, dict[str, Any], str, float | None]


class BuiltTerm(Protocol):
    """What a term builder returns (a ``RewardTerm``): the callable is all a worker keeps."""

    @property
    def fn(self) -> Any: ...


# how a worker builds a term from its spec (``astrai.rewards.build.build_term``): handed to the
# worker process by reference, so this module needs no import of the modules that call it
TermBuilder = Callable[[dict[str, Any], str, "float | None"], BuiltTerm]
# what a worker answers a call with: ("ok", scores) | ("invalid", message) |
# ("raised", what, message) | ("unbuilt", message)
Reply = tuple[Any, ...]


class RewardCallAbandoned(BaseException):  # noqa: N818 (a decision, not an error)
    """A reward call was abandoned: ``abandon_reward_calls()`` (or ``Reward.close()``) killed
    the worker it was waiting for. A ``BaseException``, as ``StopInterrupt``: raised in astrai's
    own code, it passes through the ``except Exception`` of a caller that means the reward."""


class WorkerStartFailed(Exception):
    """The worker exited before it was ready to score (its start failed: see its stderr)."""


class CallTimeout(Exception):
    """A call did not return: past its timeout (the worker is killed), or the worker died."""


_live: set[RewardWorker] = set()
_live_lock = threading.Lock()


def abandon_reward_calls() -> None:
    """SIGKILL every live reward worker of this process: a thread blocked in a reward call
    raises ``RewardCallAbandoned`` promptly (within ``POLL_S``); a later call starts a fresh
    worker. Safe from any thread, and from a signal handler (it only sends signals)."""
    with _live_lock:
        workers = list(_live)
    for worker in workers:
        worker.abandon()


atexit.register(abandon_reward_calls)  # no worker outlives the trainer's exit


def preload_for(modules: list[str]) -> tuple[str, ...]:
    """What a forkserver serving terms from ``modules`` (astrai's own) preloads."""
    lazy = [name for module in modules for name in LAZY_IMPORTS.get(module, ())]
    return tuple(dict.fromkeys([*PRELOAD, *modules, *lazy]))


class RewardWorker:
    """One worker process serving the terms ``specs``; used by one thread at a time."""

    def __init__(
        self, specs: list[TermSpec], build: TermBuilder, modules: list[str] | None = None
    ) -> None:
        self.conn, child = multiprocessing.Pipe(duplex=True)
        self.abandoned = False
        self.dead = False
        self.ready = False  # the worker said it started (a death before that is no timeout)
        # not a daemon: a daemonic process may not start processes (a reward using a Pool)
        self.process = ForkserverProcess(
            target=serve,
            args=(child, specs, build, list(sys.path), os.getcwd()),
            name="astrai-reward-worker",
        )
        self.process.preload = preload_for(modules or [])
        with _live_lock:
            _live.add(self)
        try:
            self.process.start()
        except BaseException:
            with _live_lock:
                _live.discard(self)
            self.conn.close()
            raise
        finally:
            child.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def call(self, request: tuple[Any, ...], timeout_s: float | None) -> Reply:
        """Send ``request`` (term name, positional args, keyword context) and wait for the
        reply, ``timeout_s`` at most (None: no bound, but still in short slices).

        Raises ``CallTimeout`` (the worker is dead then), ``RewardCallAbandoned``, or whatever
        a signal handler raised while waiting (after killing the worker)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            self.conn.send(request)
            while True:
                wait = POLL_S
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        raise CallTimeout(f"no return within reward.timeout_s={timeout_s:g}s")
                if self.conn.poll(wait):
                    reply: Reply = self.conn.recv()
                    if reply == READY:
                        self.ready = True
                        continue
                    return reply
                if not self.process.is_alive():
                    raise EOFError
        except (EOFError, OSError):  # the worker died, or was killed from another thread
            self.close()
            if self.abandoned:
                raise RewardCallAbandoned("the reward call was abandoned") from None
            if not self.ready:  # never a silent timeout_score for a worker that cannot start
                raise WorkerStartFailed(
                    f"the reward worker exited before it was ready (exit code "
                    f"{self.process.exitcode}; its error is printed above)"
                ) from None
            raise CallTimeout(
                f"the reward worker died (exit code {self.process.exitcode})"
            ) from None
        except BaseException:
            self.close()
            raise

    def abandon(self) -> None:
        """Kill the process from any thread; its caller, if one waits, raises
        ``RewardCallAbandoned``."""
        self.abandoned = True
        self._kill()

    def _kill(self) -> None:
        with _live_lock:
            _live.discard(self)
        sigkill(self.process)

    def close(self) -> None:
        """Kill the process and release the pipe; by the thread that uses this worker."""
        if self.dead:
            return
        self.dead = True
        self._kill()
        with contextlib.suppress(Exception):
            self.process.join(1.0)
        with contextlib.suppress(Exception):
            self.conn.close()


# --- the worker's side ----------------------------------------------------------------------


def serve(
    conn: Connection, specs: list[TermSpec], build: TermBuilder, path: list[str], cwd: str
) -> None:
    """The worker's main loop: build the terms (``build``: ``astrai.rewards.build.build_term``,
    handed over by reference so this module needs no import of its caller), then answer calls
    until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the trainer's to act on
    die_with_parent()
    sys.path[:] = path
    with contextlib.suppress(OSError):
        os.chdir(cwd)
    fns: dict[str, Any] = {}
    unbuilt = ""
    try:
        for name, node, where, weight in specs:
            fns[name] = build(node, where, weight).fn
    except BaseException as err:  # noqa: BLE001 (told to the caller at its first call)
        unbuilt = f"{type(err).__name__}: {err}"
    try:
        conn.send(READY)
    except (OSError, ValueError):
        os._exit(0)
    while True:
        try:
            name, args, context = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            os._exit(0)
        reply = ("unbuilt", unbuilt) if unbuilt else run_term(name, fns[name], args, context)
        try:
            conn.send(reply)
        except (OSError, ValueError):
            os._exit(0)


def run_term(name: str, fn: Any, args: tuple[Any, ...], context: dict[str, Any]) -> Reply:
    """One call of a term, its outcome as plain data (a reply)."""
    prompts, responses, _ = args
    try:
        values = list(fn(*args, **context))  # a generator's items are the reward's code too
    except BaseException as err:  # noqa: BLE001 (user code: SystemExit, KeyboardInterrupt...)
        try:
            message = str(err)
        except Exception:  # noqa: BLE001 (a user __str__)
            message = type(err).__name__
        return ("raised", describe_failure(err), message)
    try:
        return ("ok", check_scores(name, prompts, responses, values))
    except RewardError as err:
        return ("invalid", str(err))
