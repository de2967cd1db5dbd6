"""The host's side of an environment host (``envs.hosts``): one episode slot's environment, its
own long-lived event loop, and the loop with which a worker process serves calls.

Both modes run a call through ``HostState.run``: in process mode in the worker's main thread
(``serve``), in thread mode in the slot's own daemon thread (``host_slot``). An awaitable result
(``async def step``) is awaited on the slot's event loop, one per host and kept across its
calls, so an ``asyncio.Lock`` or a client made in ``reset`` works in every later step (a fresh
``asyncio.run`` per call would fail with "attached to a different loop"). ``make`` cancels the
tasks the previous environment left on it.

A reply is plain data: ``("ok", value, seconds)`` or ``(cause, one line, seconds)``, the cause
``raised`` unless the exception's class names another (``failure_cause``: an agent's
``endpoint.trace.TraceBreak`` is ``trace_break``); the user's exception never crosses the pipe,
so a ``ConnectionError`` a step raised is reported as such, never mistaken for the pipe's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, NoReturn

from astrai.forkserver_process import die_with_parent

# the environment's methods a host calls (``make`` builds it; ``parse`` runs a user's parser)
ENV_METHODS = ("reset", "step", "final_reward", "tools")
METHODS = ("make", *ENV_METHODS, "parse")
Reply = tuple[str, Any, float]  # ("ok", value, seconds) | (cause, one line, seconds)


def error_line(err: BaseException) -> str:
    """``Type: the message's first line`` (the type alone when there is no message)."""
    try:
        text = str(err)
    except Exception:  # noqa: BLE001 (a user's __str__)
        text = ""
    first = text.splitlines()[0].strip() if text.strip() else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def failure_cause(err: BaseException) -> str:
    """``raised``, or the cause ``err``'s class declares (a ``failure_cause`` string)."""
    cause = getattr(type(err), "failure_cause", None)
    return cause if isinstance(cause, str) else "raised"


class HostState:
    """One slot's environment (None until ``make``) and its event loop (made at the first
    awaitable). Used by one call at a time; ``cancel`` and ``discard`` may come from another
    thread."""

    def __init__(self) -> None:
        self.env: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Future[Any] | None = None
        self._cancelled = False
        self._running = False  # a call is in progress
        self._discarded = False  # its slot is done with it: its loop is to be closed
        self._lock = threading.Lock()

    def run(self, method: str, args: tuple[Any, ...]) -> Reply:
        """One call (``METHODS``), its outcome as a reply; whatever the user's code raises,
        ``SystemExit`` and ``KeyboardInterrupt`` included, is a ``raised`` reply."""
        start = time.perf_counter()
        with self._lock:
            self._running = True
        try:
            value = self._called(method, args)
            if inspect.isawaitable(value):
                value = self._awaited(value)
        except BaseException as err:  # noqa: BLE001 (user code: anything at all)
            return (failure_cause(err), error_line(err), time.perf_counter() - start)
        finally:
            with self._lock:
                self._running = False
                close = self._discarded
            if close:  # discarded while this call ran (a timeout): its thread closes the loop
                self._close_loop()
        return ("ok", value, time.perf_counter() - start)

    def discard(self) -> None:
        """The slot is done with this state (thread mode): its loop is closed, its tasks
        cancelled first, by the call still running on it as it ends, else in a daemon thread
        (the tasks' handlers are user code: never run in the caller's thread)."""
        with self._lock:
            self._discarded = True
            idle = not self._running
        if idle and self._loop is not None:
            threading.Thread(target=self._close_loop, name="astrai-env-loop", daemon=True).start()

    def cancel(self) -> None:
        """Cancel the awaited task (thread mode, on a timeout): from any thread, before or
        while it runs."""
        with self._lock:
            self._cancelled = True
            task, loop = self._task, self._loop
        if task is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(task.cancel)

    def _called(self, method: str, args: tuple[Any, ...]) -> Any:
        if method == "make":
            cls, kwargs = args
            self.env = None  # a constructor that fails leaves no environment behind
            self._drop_tasks()
            self.env = cls(**kwargs)
            return None
        if method == "parse":
            fn, text = args
            return fn(text)
        if method not in ENV_METHODS:
            raise ValueError(f"an environment host has no method {method!r}")
        if self.env is None:
            raise RuntimeError(f"{method}: this slot holds no environment (make one first)")
        return getattr(self.env, method)(*args)

    def _awaited(self, awaitable: Any) -> Any:
        """``awaitable`` run to its end on this slot's loop."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        task = asyncio.ensure_future(awaitable, loop=self._loop)
        with self._lock:
            self._task = task
            if self._cancelled:  # timed out before the task existed
                task.cancel()
        try:
            return self._loop.run_until_complete(task)
        finally:
            with self._lock:
                self._task = None

    def _drop_tasks(self) -> None:
        """Cancel what the previous environment left running on the loop, and let it end."""
        if self._loop is None:
            return
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        if tasks:
            gathered = asyncio.gather(*tasks, return_exceptions=True)
            self._loop.run_until_complete(gathered)

    def _close_loop(self) -> None:
        """Close the loop, once, after cancelling its tasks (so none is destroyed pending and
        the loop is not left to the garbage collector, whose order can break its close)."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(Exception):  # a task's handler that raises: closed anyway
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()


# --- a worker process's main loop -----------------------------------------------------------


def serve(conn: Connection, path: list[str], cwd: str) -> None:
    """A worker process's life: with the parent's ``sys.path`` and working directory, answer
    calls ``(method, args)`` with replies until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the trainer's to act on
    die_with_parent()
    sys.path[:] = path
    with contextlib.suppress(OSError):
        os.chdir(cwd)
    state = HostState()
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError, KeyboardInterrupt):
            _exit()
        try:
            path, cwd, call = ForkingPickler.loads(data)  # plain data: always readable
            _follow(path, cwd)
            method, args = ForkingPickler.loads(call)
        except BaseException as err:  # noqa: BLE001 (a class its module cannot give back)
            reply: Reply = (
                "raised",
                f"the call cannot be read in its worker: {error_line(err)}",
                0,
            )
            method = "call"
        else:
            reply = state.run(method, args)
        _send(conn, method, reply)


def _follow(path: list[str], cwd: str) -> None:
    """The caller's ``sys.path`` and working directory, as of its call."""
    if sys.path != path:
        sys.path[:] = path
    if cwd:
        with contextlib.suppress(OSError):
            if os.getcwd() != cwd:
                os.chdir(cwd)


def _send(conn: Connection, method: str, reply: Reply) -> None:
    """``reply`` to the parent; a value that cannot be pickled is an error reply instead."""
    try:
        data = bytes(ForkingPickler.dumps(reply))
    except Exception as err:  # noqa: BLE001 (a value holding a lock, a lambda...)
        why = f"{method} returned what cannot be sent back from its worker: {error_line(err)}"
        data = bytes(ForkingPickler.dumps(("raised", why, reply[2])))
    try:
        conn.send_bytes(data)
    except (OSError, ValueError):
        _exit()


def _exit() -> NoReturn:
    """End the worker at once (no ``atexit``, no join of the environment's threads), with what
    the environment printed flushed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)
