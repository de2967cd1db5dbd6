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
step's end, so a long rollout does not hold a stop for minutes. At exit the two signals are
ignored outright (``_ignore_stop_signals_at_exit``): Python's finalization would otherwise put
their default action back, and a late signal would turn a finished run's exit 0 into 143.

The time budget (``trainer.max_duration``, ``StopRequest(max_duration_s)``) stops the same way.
A watchdog thread (``BudgetWatch``) notices the moment it runs out: inside ``interruptible()``
it sends the main thread ``BUDGET_SIGNAL`` (``signal.pthread_kill``: a real signal also wakes a
blocking ``time.sleep``, socket read or lock wait, which a simulated interrupt would not), whose
handler raises ``StopInterrupt("max_duration")``; work entering ``interruptible()`` later is
abandoned on entry; elsewhere (the update, a checkpoint, every multi-process run) the run stops
at the step's end as before. The bound: the run stops at most the rest of the current step's
non-interruptible work (reference/critic pass and update epochs) + one checkpoint write + ~1 s
after the budget; a multi-process run, the rest of the current step (its sampling and
evaluation included) + one checkpoint write. Reward code that never returns to Python (a C
loop that ignores signals) is bounded only by ``reward.timeout_s``. No SIGALRM: math-verify and
user rewards use ``signal.alarm`` for their own timeouts.

In a multi-process run started by ``python train.py`` (``astrai.training.launch``), the
launcher is the process that gets the signal (``docker stop`` signals the container's main
process; the workers run in sessions of their own, so a Ctrl-C reaches the launcher alone):
``StopForwarder`` passes it on to every worker once and bounds their stop by the grace period.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import signal
import threading
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
    ``interruptible()``; ``completed``, the stop that signal asked for is done;
    ``budget_spent``, the run's time budget ran out (``BudgetWatch``)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.received: str | None = None
        self.in_run = False
        self.interruptible = False
        self.completed = False
        self.budget_spent = False


SIGNALS = SignalState()  # one per process, as signal handlers are
# entering ``interruptible()`` and the budget running out take it, so that one of the two always
# sees the other: work is abandoned on entry, or the watchdog signals it
_ENTRY_LOCK = threading.Lock()
# the main thread's wake-up when the budget runs out inside ``interruptible()``: its default
# action is to ignore it, so one delivered after ``StopRequest`` restored the handlers is
# harmless, and nothing in the trainer uses it (SIGALRM is math-verify's and user rewards',
# SIGUSR1/2 are Slurm's and users')
BUDGET_SIGNAL = signal.SIGURG
BUDGET_REASON = "max_duration"


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


def on_budget_signal(signum: int, frame: FrameType | None) -> None:
    """The handler of ``BUDGET_SIGNAL`` during a ``StopRequest`` with a budget: the watchdog
    says the budget ran out inside ``interruptible()``; abandon that work."""
    if SIGNALS.interruptible and SIGNALS.received is None:
        SIGNALS.interruptible = False  # raised once; the work is being abandoned
        raise StopInterrupt(BUDGET_REASON)


def catch_stop_signals() -> None:
    """From now on, in this process, a first SIGTERM/SIGINT is a stop request whenever it comes
    (``python train.py`` calls it first thing); a second kills, one after a completed stop is
    ignored, and so is one during the interpreter's exit."""
    if signal.getsignal(signal.SIGTERM) is on_stop_signal:  # already (``train.py``'s first line)
        return
    SIGNALS.clear()
    install_handlers(dict.fromkeys(STOP_SIGNALS, on_stop_signal))
    atexit.unregister(_ignore_stop_signals_at_exit)  # once, however often main() runs in-process
    atexit.register(_ignore_stop_signals_at_exit)  # atexit runs before finalization resets them


def _ignore_stop_signals_at_exit() -> None:
    """The process is ending and its work is done (a stop completed, or the run ended): ignore
    the stop signals from here on. Python's finalization (``_PySignal_Fini``, after the atexit
    callbacks) sets every signal with a Python handler back to its default action while module
    teardown still runs, so a SIGTERM then killed a finished run with 143; SIG_IGN survives it."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is on_stop_signal:  # someone else's choice stays theirs
            signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def interruptible(enabled: bool = True) -> Iterator[None]:
    """Inside: the first stop signal raises ``StopInterrupt`` at once (also on entry when one
    came before). For work that changes no state a checkpoint holds, in a one-process run
    (ranks abandoning work at different points would leave a collective waiting)."""
    if not enabled:
        yield
        return
    try:  # a signal may raise as soon as the flag is set: the finally clears it then too
        with _ENTRY_LOCK:
            pending = SIGNALS.received or (BUDGET_REASON if SIGNALS.budget_spent else None)
            SIGNALS.interruptible = pending is None
        if pending is not None:
            raise StopInterrupt(pending)
        yield
    finally:
        SIGNALS.interruptible = False


class StopRequest:
    """Context manager that turns SIGTERM/SIGINT into ``reason`` and watches a time budget
    (``BudgetWatch``: work inside ``interruptible()`` is abandoned the moment it runs out).

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
        self._watch: BudgetWatch | None = None

    def __enter__(self) -> StopRequest:
        self._start = time.monotonic()
        handlers: dict[int, Handler] = dict.fromkeys(STOP_SIGNALS, on_stop_signal)
        if self.max_duration_s is not None:
            handlers[BUDGET_SIGNAL] = on_budget_signal
        self._previous = install_handlers(handlers)
        previous = [self._previous[s] for s in STOP_SIGNALS if s in self._previous]
        self._process_wide = bool(previous) and all(h is on_stop_signal for h in previous)
        if not self._process_wide:
            SIGNALS.clear()
        SIGNALS.in_run = True
        SIGNALS.budget_spent = False  # a sequential sweep's earlier job spent its own
        if self.max_duration_s is not None and self._previous:  # handlers: the main thread's
            self._watch = BudgetWatch(self.max_duration_s)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._watch is not None:  # before the handlers go: it signals no more after this
            self._watch.close()
            self._watch = None
        restore_handlers(self._previous)
        SIGNALS.in_run = SIGNALS.interruptible = SIGNALS.budget_spent = False
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
        # (``BudgetWatch`` marks the budget spent no sooner than this says so)
        if self.max_duration_s is not None and self.elapsed_s >= self.max_duration_s:
            return BUDGET_REASON
        return None

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._start


class BudgetWatch:
    """A daemon thread that waits out a time budget, then marks it spent and, when the main
    thread is inside ``interruptible()``, sends it ``BUDGET_SIGNAL`` (once), so that work is
    abandoned now rather than at the step's end. Multi-process runs never enter
    ``interruptible()`` (their ranks would abandon work at different points): for them this
    only marks the budget, and the ranks agree at the step's end.

    Args:
        seconds: the budget from now.
    """

    def __init__(self, seconds: float) -> None:
        self._closed = threading.Event()
        self._main = threading.main_thread().ident
        self._thread = threading.Thread(
            target=self._watch, args=(seconds,), name="astrai-time-budget", daemon=True
        )
        self._thread.start()

    def _watch(self, seconds: float) -> None:
        if self._closed.wait(seconds):
            return
        with _ENTRY_LOCK:
            if self._closed.is_set():
                return
            SIGNALS.budget_spent = True
            abandon = SIGNALS.interruptible and SIGNALS.received is None
            if abandon and self._main is not None:
                signal.pthread_kill(self._main, BUDGET_SIGNAL)
        log.warning(
            "trainer.max_duration (%gs) spent: %s, then checkpoint and exit",
            seconds,
            "abandoning the sampling or evaluation in progress" if abandon else "ending this step",
        )

    def close(self) -> None:
        """Stop watching; after this no signal comes from it."""
        with _ENTRY_LOCK:
            self._closed.set()
        self._thread.join()


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


# in priority order; "stop_at": the run's metrics reached ``trainer.stop_at`` (training.loop)
STOP_REASONS = ("SIGTERM", "SIGINT", "max_duration", "stop_at")


def agreed_stop_reason(reason: str | None) -> str | None:
    """Every rank stops at the same step: if any rank was signalled (or ran out of time), all
    stop, with the first reason in ``STOP_REASONS`` order that any rank saw."""
    code = 0.0 if reason is None else float(len(STOP_REASONS) - STOP_REASONS.index(reason))
    from astrai.distributed import all_reduce_max  # torch: not needed to catch a signal early

    agreed = int(all_reduce_max(code))
    return None if agreed == 0 else STOP_REASONS[len(STOP_REASONS) - agreed]
