"""Environment hosts (issue 58): where an environment's code runs, within limits that neither a
call holding the GIL nor one that never returns can escape.

An ``EnvHost`` is one episode slot (``envs.host_slot``): it holds at most one environment at a
time, made from its class (``make``), then reset, stepped, asked for its final reward and tools;
a user's turn parser runs there too (``parse``). ``call_hosts`` runs calls of different slots at
once, at most ``max_concurrency`` in flight, each timed from its own start; a call's outcome is
a ``Limited`` whose ``kind`` says which failure it was, if any (``raised``, ``timeout``,
``died``, ``unsent``). It never raises for the user's code.

- **process** (``env.workers=process``, the default): one worker process per slot, started
  from a forkserver at the slot's first ``make`` and kept across calls and rollouts (the
  reward worker's plumbing: ``astrai.forkserver_process``). A call past its timeout SIGKILLs
  the slot's worker, so a regex backtracking in C or a spinning step costs its episode and
  nothing more; the slot's environment is gone then, and a later call other than ``make`` is
  an error saying why (the next ``make`` starts a new worker). A worker that dies
  (``os._exit``, a segfault) is reported with its exit code. The environment class, its
  arguments and a parser cross by pickling, a class by its module path (an error names one
  that cannot, with ``env.workers=thread`` as the way out).
- **thread** (``env.workers=thread``): each call in a daemon thread, as ``tool_limits`` runs
  a tool; a timed-out call is abandoned (Python cannot stop a thread), and its slot's
  environment with it.

Either way an awaitable result is awaited on the slot's own long-lived event loop
(``envs.host_worker``); in thread mode a timeout cancels the awaited task.

While ``call_hosts`` waits (in slices of ``WAIT_SLICE_S`` at most), a thread whose steps were
abandoned (``abandon_steps_of``) raises ``StepsAbandoned``; that, or anything raised while
waiting (a stop signal's ``StopInterrupt``), first kills the workers waited on (thread mode:
abandons the calls). Each calling thread of the trainer (the main thread, the sampling
thread) has its own ``HostPool`` (``pool_for_this_thread``); every pool is closed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from collections.abc import Sequence
from multiprocessing import connection

from astrai.envs.host_slot import HOST_MODES, EnvHost, HostCall, Run, ThreadRun, check_mode, reap
from astrai.envs.tool_limits import Limited, check_abandoned
from astrai.signal_handlers import WAIT_SLICE_S

__all__ = [
    "HOST_MODES",
    "EnvHost",
    "HostCall",
    "HostPool",
    "call_hosts",
    "check_mode",
    "close_all_pools",
    "pool_for_this_thread",
]

REAP_S = 1.0  # how long a ``call_hosts`` waits, in all, for the workers it killed to be reaped
MIXED_SLICE_S = 0.005  # how often a wait on workers looks at thread-mode calls beside them


def call_hosts(calls: Sequence[HostCall], max_concurrency: int) -> list[Limited]:
    """Each of ``calls`` run on its host, at most ``max_concurrency`` in flight (the calls of
    one host one at a time, in order), each within its ``timeout_s`` from its own start.

    Returns:
        one ``Limited`` per call, in order.

    Raises only ``StepsAbandoned`` (``abandon_steps_of``) or what a signal handler raised
    while it waited, after killing the workers it waited on."""
    check_abandoned()
    results: list[Limited | None] = [None] * len(calls)
    waiting = list(range(len(calls)))
    running: dict[int, Run] = {}
    wake = threading.Event()  # set by a thread-mode call as it ends
    try:
        while waiting or running:
            _start(calls, waiting, running, results, max(1, max_concurrency), wake)
            if running:
                _wait(running, wake)
                check_abandoned()
                _collect(running, results)
    except BaseException:
        for index, run in running.items():
            calls[index].host.abandon(run, "its call was abandoned (the run stopped)")
        raise
    finally:
        reap({call.host for call in calls}, REAP_S)
    return [r if r is not None else Limited(error="never run", kind="unsent") for r in results]


def _start(
    calls: Sequence[HostCall],
    waiting: list[int],
    running: dict[int, Run],
    results: list[Limited | None],
    limit: int,
    wake: threading.Event,
) -> None:
    """Start the waiting calls whose host is free, in order, up to ``limit`` in flight."""
    blocked = {calls[i].host for i in running}
    for index in list(waiting):
        if len(running) >= limit:
            return
        host = calls[index].host
        if host in blocked:  # its host is busy, or an earlier call of it waits
            continue
        waiting.remove(index)
        started = host.begin(calls[index], wake)
        if isinstance(started, Limited):
            results[index] = started
        else:
            running[index] = started
            blocked.add(host)


def _wait(running: dict[int, Run], wake: threading.Event) -> None:
    """Until a call may have ended, a deadline came, or ``WAIT_SLICE_S`` passed."""
    left = min(run.deadline for run in running.values()) - time.monotonic()
    slice_s = max(0.0, min(WAIT_SLICE_S, left))
    handles = [handle for run in running.values() for handle in run.handles()]
    if handles:
        mixed = any(isinstance(run, ThreadRun) for run in running.values())
        with contextlib.suppress(OSError, ValueError):  # a pipe closed meanwhile (close_all_pools)
            connection.wait(handles, min(slice_s, MIXED_SLICE_S) if mixed else slice_s)
    else:
        wake.wait(slice_s)
    wake.clear()  # before looking: a call that ends after this sets it again


def _collect(running: dict[int, Run], results: list[Limited | None]) -> None:
    """The outcomes of the calls that ended or ran out of time."""
    now = time.monotonic()
    for index, run in list(running.items()):
        outcome = run.outcome(now)
        if outcome is not None:
            results[index] = outcome
            del running[index]


class HostPool:
    """The slots of one calling thread (``mode``: ``process`` or ``thread``), reused across
    rollouts: a slot's worker lives on between calls and rollouts."""

    def __init__(self, mode: str) -> None:
        check_mode(mode)
        self.mode = mode
        self._hosts: list[EnvHost] = []

    def hosts(self, n: int) -> list[EnvHost]:
        """``n`` slots: the pool's first ``n``, grown as needed."""
        while len(self._hosts) < n:
            self._hosts.append(EnvHost(self.mode))
        return self._hosts[:n]

    def close(self) -> None:
        """Kill every worker (and reap them, ``REAP_S`` at most)."""
        for host in self._hosts:
            host.close()
        reap(self._hosts, REAP_S)

    def live_abandoned(self) -> int:
        """Thread mode: timed-out calls whose thread still runs; process mode: killed workers
        not reaped yet."""
        return sum(host.live_abandoned() for host in self._hosts)


_pools: dict[tuple[threading.Thread, str], HostPool] = {}
_pools_lock = threading.Lock()


def pool_for_this_thread(mode: str) -> HostPool:
    """The calling thread's pool of ``mode`` (made at its first use); the pools of threads
    that ended are closed here."""
    check_mode(mode)
    thread = threading.current_thread()
    with _pools_lock:
        ended = [key for key in _pools if not key[0].is_alive()]
        stale = [_pools.pop(key) for key in ended]
        pool = _pools.get((thread, mode))
        if pool is None:
            pool = _pools[(thread, mode)] = HostPool(mode)
    for old in stale:
        old.close()
    return pool


def close_all_pools() -> None:
    """Close every thread's pool: no worker outlives the trainer's exit. Safe from any
    thread."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


# registered after multiprocessing's exit handler (``connection`` imports ``util``, which
# registers it), so it runs first: the workers are killed before it joins them
atexit.register(close_all_pools)
