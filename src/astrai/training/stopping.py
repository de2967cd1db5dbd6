"""Graceful stop: SIGTERM/SIGINT and a wall-clock budget end a run at a step boundary.

The first signal asks the trainer to finish the current step, write a checkpoint and exit 0
(what Slurm's preemption, ``docker stop`` and Ctrl-C expect). A second signal restores the
default action and re-raises it, so the process dies at once; checkpoints are written under a
temporary name and renamed, so the last complete one is never damaged.

``python train.py`` catches the two signals from its first line (``catch_stop_signals``): one
during start-up (imports, model build) or the step-0 evaluation stops the run before its first
step, exit 0, nothing to save; one after the run's stop completed is ignored (the exit stays 0).
Inside ``interruptible()`` (a one-process run's sampling and its evaluations: work that changes
no training state) the first signal raises ``StopInterrupt`` at once instead of waiting for the
step's end, so a long rollout does not hold a stop for minutes.

In a multi-process run started by ``python train.py`` (``astrai.training.launch``), the
launcher is the process that gets the signal (``docker stop`` signals the container's main
process; the workers run in sessions of their own, so a Ctrl-C reaches the launcher alone):
``StopForwarder`` passes it on to every worker once and bounds their stop by the grace period.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType

from astrai.signal_handlers import STOP_SIGNALS, Handler, install_handlers, restore_handlers

log = logging.getLogger(__name__)


class StopInterrupt(BaseException):  # noqa: N818 (a request, not an error)
    """A stop signal arrived inside ``interruptible()``: the work there is abandoned. A
    ``BaseException``, as ``KeyboardInterrupt``: a reward's ``except Exception`` lets it pass."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class SignalState:
    """What this process has been told: ``received``, the first stop signal's name;
    ``in_run``, a run's loop is going (``StopRequest``); ``interruptible``, inside
    ``interruptible()``; ``completed``, the stop that signal asked for is done."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.received: str | None = None
        self.in_run = False
        self.interruptible = False
        self.completed = False


SIGNALS = SignalState()  # one per process, as signal handlers are


def on_stop_signal(signum: int, frame: FrameType | None) -> None:
    """The handler of SIGTERM and SIGINT, process-wide (``catch_stop_signals``) or for one run's
    loop (``StopRequest``)."""
    name = signal.Signals(signum).name
    if SIGNALS.completed:
        log.warning("%s received after the run stopped: ignored", name)
        return
    if SIGNALS.received is not None:
        # second signal: no more grace, die the way the signal says
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    SIGNALS.received = name
    if SIGNALS.interruptible:
        log.warning("%s received: abandoning this step's sampling, then checkpoint and exit", name)
        raise StopInterrupt(name)
    if SIGNALS.in_run:
        log.warning("%s received: finishing this step, then checkpoint and exit", name)
    else:
        log.warning("%s received: stopping before the next step (none is in progress)", name)


def catch_stop_signals() -> None:
    """From now on, in this process, a first SIGTERM/SIGINT is a stop request whenever it comes
    (``python train.py`` calls it first thing); a second kills, one after a completed stop is
    ignored."""
    if signal.getsignal(signal.SIGTERM) is on_stop_signal:  # already (``train.py``'s first line)
        return
    SIGNALS.clear()
    install_handlers(dict.fromkeys(STOP_SIGNALS, on_stop_signal))


@contextlib.contextmanager
def interruptible(enabled: bool = True) -> Iterator[None]:
    """Inside: the first stop signal raises ``StopInterrupt`` at once (also on entry when one
    came before). For work that changes no state a checkpoint holds, in a one-process run
    (ranks abandoning work at different points would leave a collective waiting)."""
    if not enabled:
        yield
        return
    if SIGNALS.received is not None:
        raise StopInterrupt(SIGNALS.received)
    SIGNALS.interruptible = True
    try:
        yield
    finally:
        SIGNALS.interruptible = False


class StopRequest:
    """Context manager that turns SIGTERM/SIGINT into ``reason`` and watches a time budget.

    Inside ``catch_stop_signals`` it carries on what the process was told before (a signal
    during start-up is already the reason) and, on exit after a stop, leaves later signals
    ignored; on its own (a library call, a test) each request starts and ends afresh.

    Args:
        max_duration_s: wall-clock budget in seconds from ``__enter__``; None = no budget.
    """

    def __init__(self, max_duration_s: float | None = None) -> None:
        self.max_duration_s = max_duration_s
        self._start = 0.0
        self._previous: dict[int, object] = {}
        self._process_wide = False

    def __enter__(self) -> StopRequest:
        self._start = time.monotonic()
        self._previous = install_handlers(dict.fromkeys(STOP_SIGNALS, on_stop_signal))
        previous = list(self._previous.values())
        self._process_wide = bool(previous) and all(h is on_stop_signal for h in previous)
        if not self._process_wide:
            SIGNALS.clear()
        SIGNALS.in_run = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        restore_handlers(self._previous)
        SIGNALS.in_run = SIGNALS.interruptible = False
        if not self._process_wide:
            SIGNALS.clear()
        elif SIGNALS.received is not None:  # the stop is done: nothing left to stop
            SIGNALS.completed = True

    @property
    def signal_name(self) -> str | None:
        """The first stop signal received (``"SIGTERM"``, ``"SIGINT"``), or None."""
        return SIGNALS.received

    @property
    def reason(self) -> str | None:
        """Why the run should stop now (``"SIGTERM"``, ``"SIGINT"``, ``"max_duration"``)."""
        if self.signal_name is not None:
            return self.signal_name
        if self.max_duration_s is not None and self.elapsed_s >= self.max_duration_s:
            return "max_duration"
        return None

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._start


def live_children() -> list[int]:
    """Process ids of this process's live ``multiprocessing`` children (the elastic launcher's
    workers are ``multiprocessing`` processes started with ``spawn``)."""
    return [p.pid for p in multiprocessing.active_children() if p.pid is not None]


class StopForwarder:
    """In the launcher of a multi-process run: SIGTERM/SIGINT are passed on to the workers,
    which stop the way ``StopRequest`` says (finish the step, checkpoint, return); after
    ``grace_s`` seconds the workers still alive are killed with SIGKILL.

    This replaces torch elastic's own handling of the two signals, which raises in the
    launcher (exit 1 although the workers stopped cleanly) and kills the workers after a fixed
    30 s. A second signal is forwarded too (the workers then die at once) and ends the launcher
    by that signal; so does a signal that arrives while there are no workers to forward it to
    (before they start, or after they ended), like a single process outside ``StopRequest``.

    Args:
        grace_s: seconds between the first signal and SIGKILL of the workers.
        children: the worker process ids (the live ``multiprocessing`` children by default).
    """

    def __init__(self, grace_s: float, children: Callable[[], list[int]] = live_children) -> None:
        self.grace_s = grace_s
        self.children = children
        self.signal_name: str | None = None
        self.killed: list[int] = []
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopForwarder:
        handlers: dict[int, Handler] = dict.fromkeys(STOP_SIGNALS, self._handle)
        self._previous = install_handlers({**handlers, signal.SIGALRM: self._grace_over})
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._previous:
            signal.setitimer(signal.ITIMER_REAL, 0)  # cancel a grace period still running
        restore_handlers(self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        pids = self.children()
        _send(pids, signum)
        # a second signal: no more grace; no workers (not started yet, or already ended): no
        # one would stop at a step boundary, so there is nothing to wait for
        if self.signal_name is not None or not pids:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signal_name = name
        # SIGALRM runs the kill in the main thread, the one that also reaps the workers
        signal.setitimer(signal.ITIMER_REAL, self.grace_s)
        log.warning(
            "%s received: forwarded to %d workers; they finish this step and checkpoint "
            "(SIGKILL in %gs)",
            name,
            len(pids),
            self.grace_s,
        )

    def _grace_over(self, signum: int, frame: FrameType | None) -> None:
        self.killed = self.children()
        if self.killed:
            log.error(
                "workers %s did not stop within %gs of %s: SIGKILL",
                self.killed,
                self.grace_s,
                self.signal_name,
            )
            _send(self.killed, signal.SIGKILL)


def _send(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # ended in the meantime
            pass


STOP_REASONS = ("SIGTERM", "SIGINT", "max_duration")


def agreed_stop_reason(reason: str | None) -> str | None:
    """Every rank stops at the same step: if any rank was signalled (or ran out of time), all
    stop, with the first reason in ``STOP_REASONS`` order that any rank saw."""
    code = 0.0 if reason is None else float(len(STOP_REASONS) - STOP_REASONS.index(reason))
    from astrai.distributed import all_reduce_max  # torch: not needed to catch a signal early

    agreed = int(all_reduce_max(code))
    return None if agreed == 0 else STOP_REASONS[len(STOP_REASONS) - agreed]
