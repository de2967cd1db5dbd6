"""One environment host (``envs.hosts``): an episode slot (``EnvHost``) and its calls in flight
(``ProcessRun``, ``ThreadRun``), watched by ``hosts.call_hosts``.

A slot holds at most one environment at a time. In process mode it runs in the slot's worker
process (``host_worker.serve``, started from a forkserver at the first ``make``, kept across
calls and rollouts, SIGKILLed when a call runs past its timeout); in thread mode each call runs
in a daemon thread (abandoned on a timeout). Either way a slot whose call timed out, died or
was abandoned holds no environment until the next ``make``: every other call on it is an
``unsent`` error saying why.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from typing import Any

from astrai.envs.host_worker import METHODS, HostState, Reply, error_line, serve
from astrai.envs.tool_limits import Limited
from astrai.forkserver_process import ForkserverProcess, sigkill

HOST_MODES = ("process", "thread")
# what a worker's forkserver imports once (so a worker's start is a fork); the module of the
# class a worker is started for is added (``_started``): the trainer imported it already
PRELOAD = ("astrai.envs.host_worker",)
WAY_OUT = "or run environments in threads: env.workers=thread"
NO_ENV = "no environment was made in it"

# every worker not yet let go, of every host: killed at exit, whether or not its pool was closed
# (a worker waits on its pipe, and multiprocessing's exit handler would wait on the worker)
_live: set[_Worker] = set()
_live_lock = threading.Lock()


@dataclass(frozen=True)
class HostCall:
    """One call of ``host``: ``method`` (``make`` ``(cls, kwargs)``, ``reset`` ``(row,)``,
    ``step`` ``(turn,)``, ``final_reward`` ``()``, ``tools`` ``()``, ``parse`` ``(fn, text)``)
    within ``timeout_s`` seconds."""

    host: EnvHost
    method: str
    args: tuple[Any, ...]
    timeout_s: float


def check_mode(mode: str) -> None:
    """``ValueError`` naming ``env.workers`` unless ``mode`` is one of ``HOST_MODES``."""
    if mode not in HOST_MODES:
        raise ValueError(f"env.workers must be one of {', '.join(HOST_MODES)} (got {mode!r})")


class EnvHost:
    """One episode slot (``mode``: ``process`` or ``thread``): at most one environment at a
    time. Used by one thread at a time (its pool's)."""

    def __init__(self, mode: str) -> None:
        check_mode(mode)
        self.mode = mode
        self.worker: _Worker | None = None  # process mode
        self.state = HostState()  # thread mode
        self.made = False  # holds a live environment
        self.gone = NO_ENV  # why it holds none
        self.runner: _SlotThread | None = None  # thread mode: the thread its calls run in
        # killed workers (process mode) or abandoned threads (thread mode), until they end
        self.abandoned: list[ForkserverProcess | threading.Thread] = []

    @property
    def pid(self) -> int | None:
        """Its worker's process id (process mode, while it has one)."""
        return None if self.worker is None else self.worker.process.pid

    def begin(self, call: HostCall, wake: threading.Event) -> Run | Limited:
        """``call`` started (a run to watch), or its outcome at once when it cannot start."""
        if call.method not in METHODS:
            return _unsent(f"an environment host has no method {call.method!r}")
        if call.method == "make":  # the old environment is done with, whatever comes of it
            self.made, self.gone = False, "its make did not finish"
        elif not self.made:
            return _unsent(f"{call.method}: the environment is gone ({self.gone})")
        if call.timeout_s <= 0:  # no time left: nothing is sent, the environment is untouched
            return Limited(error="timed out after 0 s", timed_out=True, kind="timeout")
        if self.mode == "thread":
            return ThreadRun(self, call, wake)
        payload = _pickled(call)
        if isinstance(payload, str):
            return _unsent(payload)
        if call.method == "make" and self.worker and self.worker.process.exitcode is not None:
            self.drop_worker(kill=False)  # it died between calls: a make starts anew
        if self.worker is None:
            try:
                self.worker = _started(call.args[0] if call.args else None)
            except (OSError, EOFError) as err:
                return _unsent(f"the environment's worker could not start: {error_line(err)}")
        try:
            self.worker.conn.send_bytes(payload)
        except (OSError, ValueError):  # it died between calls
            return self.died(call, self.worker, 0.0)
        return ProcessRun(self, call, self.worker)

    def settle(self, call: HostCall, reply: Reply) -> Limited:
        """A call's reply as a ``Limited``; a ``make`` that raised leaves no environment."""
        status, value, seconds = reply
        if call.method == "make":
            self.made = status == "ok"
            self.gone = NO_ENV if self.made else "its make raised"
        if status == "ok":
            return Limited(value=value, seconds=seconds)
        return Limited(error=value, seconds=seconds, kind=status)  # raised, or a declared cause

    def died(self, call: HostCall, worker: _Worker, seconds: float) -> Limited:
        """``worker`` died under ``call`` (or was killed by ``close`` from another thread):
        reaped, its exit code told."""
        if self.worker is worker:
            self.drop_worker(kill=False)
        worker.process.join(1.0)
        why = f"its worker process died ({_exit_text(worker.process.exitcode)})"
        self.made, self.gone = False, why
        return Limited(error=f"{call.method}: {why}", seconds=seconds, kind="died")

    def timed_out(self, call: HostCall, run: Run) -> Limited:
        """``call`` ran past its timeout: its worker killed (thread mode: abandoned)."""
        done = "worker was killed" if self.mode == "process" else "call was abandoned"
        self.abandon(run, f"its {done} after a timeout of {call.timeout_s:g} s")
        return Limited(
            error=f"timed out after {call.timeout_s:g} s",
            timed_out=True,
            seconds=call.timeout_s,
            kind="timeout",
        )

    def abandon(self, run: Run, why: str) -> None:
        """Stop waiting for ``run``: kill the worker (thread mode: leave the thread, with the
        environment and loop it holds, and cancel its awaited task); no environment after."""
        self.made, self.gone = False, why
        if isinstance(run, ThreadRun):
            run.state.cancel()
            run.state.discard()  # its loop is closed as the thread ends
            self.abandoned.append(run.thread)
            self.state = HostState()
            self.stop_runner()  # it ends after the abandoned call; the next call starts another
        else:
            self.drop_worker(kill=True)

    def drop_worker(self, kill: bool) -> None:
        """Let the worker go (SIGKILLed first when ``kill``); it is reaped later (``reap``)."""
        if self.worker is None:
            return
        worker, self.worker = self.worker, None
        with _live_lock:
            _live.discard(worker)
        if kill:
            sigkill(worker.process)
        self.abandoned.append(worker.process)
        worker.conn.close()

    def live_abandoned(self) -> int:
        """Killed workers not reaped yet, or abandoned threads still running."""
        self.abandoned = [item for item in self.abandoned if item.is_alive()]
        return len(self.abandoned)

    def stop_runner(self) -> None:
        """Thread mode: let the slot's thread end once its call (if any) returns."""
        if self.runner is not None:
            self.runner.calls.put(None)
            self.runner = None

    def close(self) -> None:
        """Kill the worker (thread mode: drop the environment); the slot may be made again."""
        self.drop_worker(kill=True)
        self.stop_runner()
        self.state.discard()
        self.state = HostState()
        self.made, self.gone = False, "its host was closed"


class _Worker:
    """A slot's worker process (``host_worker.serve``) and the parent's end of its pipe."""

    def __init__(self, preload: tuple[str, ...]) -> None:
        self.conn, child = multiprocessing.Pipe(duplex=True)
        # not a daemon: a daemonic process may not start processes (an environment's sandbox)
        self.process = ForkserverProcess(
            target=serve, args=(child, list(sys.path), os.getcwd()), name="astrai-env-host"
        )
        self.process.preload = preload
        try:
            self.process.start()
        except BaseException:
            self.conn.close()
            raise
        finally:
            child.close()
        with _live_lock:
            _live.add(self)


_unloadable: set[str] = set()  # modules whose import killed a forkserver: not preloaded again


def _started(cls: Any) -> _Worker:
    """A worker for an environment of ``cls``, from the forkserver that preloaded its module
    as well as ours (so a worker's start neither imports it again nor counts that against the
    make's time), or from ours alone if a server cannot import it (one exiting on import)."""
    module = getattr(cls, "__module__", None)
    if not isinstance(module, str) or module not in sys.modules or module in _unloadable:
        return _Worker(PRELOAD)
    try:
        return _Worker((*PRELOAD, module))
    except (OSError, EOFError):
        _unloadable.add(module)
        return _Worker(PRELOAD)


def kill_all_workers() -> None:
    """SIGKILL every environment worker of this process (its hosts find them dead); from any
    thread. Registered at exit, after multiprocessing's own exit handler, so it runs first."""
    with _live_lock:
        workers = list(_live)
        _live.clear()
    for worker in workers:
        sigkill(worker.process)
    for worker in workers:
        worker.process.join(1.0)


atexit.register(kill_all_workers)


class ProcessRun:
    """A call in flight in a slot's worker process."""

    def __init__(self, host: EnvHost, call: HostCall, worker: _Worker) -> None:
        self.host, self.call, self.worker = host, call, worker
        self.began = time.monotonic()
        self.deadline = self.began + call.timeout_s

    def handles(self) -> list[Any]:
        """What ``connection.wait`` watches: its reply, or its worker's end."""
        if self.worker.conn.closed:  # closed by close_all_pools: outcome() says so
            return []
        return [self.worker.conn, self.worker.process.sentinel]

    def outcome(self, now: float) -> Limited | None:
        """The call's outcome if it ended or ran out of time (None: it still runs)."""
        conn = self.worker.conn
        try:
            replied = conn.poll()
            data = conn.recv_bytes() if replied else b""
        except (EOFError, OSError, ValueError):  # it died, or its pipe was closed meanwhile
            return self.host.died(self.call, self.worker, now - self.began)
        if replied:
            try:
                reply = ForkingPickler.loads(data)
            except Exception as err:  # noqa: BLE001 (a class the parent cannot import)
                why = f"{self.call.method}: its result cannot be read back: {error_line(err)}"
                return Limited(error=why, seconds=now - self.began, kind="raised")
            return self.host.settle(self.call, reply)
        if self.worker.process.exitcode is not None:
            return self.host.died(self.call, self.worker, now - self.began)
        if now >= self.deadline:
            return self.host.timed_out(self.call, self)
        return None


class _SlotThread:
    """A thread-mode slot's daemon thread, kept across its calls (a thread started per call
    waits for the GIL to start: 1.3 ms a call beside busy threads, most of an agent rollout's
    time on 2 cores, measured): it runs each queued call, ending at ``None``."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[tuple[ThreadRun, threading.Event] | None] = (
            queue.SimpleQueue()
        )
        self.thread = threading.Thread(target=self._serve, name="astrai-env-host", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while (item := self.calls.get()) is not None:
            run, wake = item
            run.box.append(run.state.run(run.call.method, run.call.args))
            wake.set()


class ThreadRun:
    """A call in flight in its slot's thread (``_SlotThread``), on its slot's state
    (environment and loop)."""

    def __init__(self, host: EnvHost, call: HostCall, wake: threading.Event) -> None:
        self.host, self.call, self.state = host, call, host.state
        self.box: list[Reply] = []
        if host.runner is None:
            host.runner = _SlotThread()
        self.thread = host.runner.thread
        self.began = time.monotonic()
        self.deadline = self.began + call.timeout_s
        host.runner.calls.put((self, wake))

    def handles(self) -> list[Any]:
        return []  # it sets the wait's event as it ends

    def outcome(self, now: float) -> Limited | None:
        if self.box:
            return self.host.settle(self.call, self.box[0])
        if now >= self.deadline:
            return self.host.timed_out(self.call, self)
        return None


Run = ProcessRun | ThreadRun


def reap(hosts: Iterable[EnvHost], budget_s: float) -> None:
    """Wait, ``budget_s`` in all, for the hosts' killed workers to be reaped."""
    deadline = time.monotonic() + budget_s
    for host in hosts:
        for item in host.abandoned:
            if isinstance(item, ForkserverProcess):
                item.join(max(0.0, deadline - time.monotonic()))
        host.live_abandoned()


def _unsent(error: str) -> Limited:
    return Limited(error=error, kind="unsent")


def _pickled(call: HostCall) -> bytes | str:
    """``call`` as the worker reads it, or why it cannot be sent to a worker process."""
    name = ""
    if call.method in ("make", "parse") and call.args:
        obj = call.args[0]
        what = "the environment class" if call.method == "make" else "the parser"
        name = f"{what} {getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', obj)}"
        if getattr(obj, "__module__", None) == "__main__" or "<locals>" in name:
            return (
                f"{name} cannot reach its worker process, which imports it by its module "
                f"path: define it at the top level of an importable module, {WAY_OUT}"
            )
    try:
        inner = bytes(ForkingPickler.dumps((call.method, call.args)))
        # the caller's import path and directory as of this call, set in the worker before it
        # reads the call: a worker kept across runs (a slot of this thread's pool) imports a
        # class from a folder put on ``sys.path`` after it started (``examples/tool_env``)
        return bytes(ForkingPickler.dumps((list(sys.path), _cwd(), inner)))
    except Exception as err:  # noqa: BLE001 (what pickling refuses: a lock, a lambda...)
        return (
            f"{call.method}: {name + ' and ' if name else ''}its arguments must be pickled to "
            f"reach the environment's worker process ({error_line(err)}); {WAY_OUT}"
        )


def _cwd() -> str:
    """This process's working directory; "" (the worker keeps its own) when it is gone."""
    try:
        return os.getcwd()
    except OSError:
        return ""


def _exit_text(code: int | None) -> str:
    """A worker's exit code, with the signal that killed it (``exit code -11, SIGSEGV``)."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"exit code {code}, {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"
