"""Graceful stop: SIGTERM/SIGINT and a wall-clock budget end a run within a stated bound, at
every phase, with exit 0.

**The bound.** A first SIGTERM/SIGINT (or ``trainer.max_duration`` running out) ends the run
within the current non-interruptible work + one checkpoint write + ~1 s, at every phase:

- start-up (composing and checking the config, the pre-run reward check, rendering prompts
  through a chat template, building the models, restoring a checkpoint): the whole phase is
  interruptible (``catch_stop_signals``), so the signal raises ``StopInterrupt`` in the main
  thread at once and ``python train.py`` exits 0 with one line, ``stopped (SIGTERM) during
  start-up`` (nothing to save; ``.hydra/`` and ``train.log`` stay and say so). The few writes of
  start-up are held shut (``deferred_stop``). The ranks of torchrun or of a Slurm job are not
  interrupted during start-up (one would leave the others in a collective): they agree at the
  loop's start and stop before step 1;
- sampling and evaluation (one process, ``interruptible()``): abandoned at once; the random
  streams go back to where the step began;
- the update, the reference/critic pass and a checkpoint write: not interruptible (the
  "current non-interruptible work"); the run stops at the step's end;
- the sampling thread (``train_type.max_policy_lag`` > 0): the training thread waiting for a
  rollout is interruptible, and a checkpoint never waits for an unfinished rollout once a stop
  is asked for: the rollouts done are saved (``in_flight.pt``), the unfinished ones are
  abandoned and saved as re-issuable (``training.sampling.overlap``: the weights they were submitted
  with and the sampling stream rewound to before them), so a resume samples them again exactly
  as the straight run did. A reward call blocked on the sampling thread is ended by killing its
  reward worker (``astrai.rewards.worker.abandon_reward_calls``).

Code that never returns to Python and holds the GIL (a C loop in a reward run in-process) is
bounded only by ``reward.timeout_s`` and the reward worker it runs in.

A second signal restores the default action and re-raises it, so the process dies at once
(exit 143 for SIGTERM); checkpoints (and every file of one) are written under a temporary
name and renamed, so the last complete one is never damaged. A signal after the run's stop
completed is ignored (the exit stays 0); at exit the two signals are ignored outright
(``_ignore_stop_signals_at_exit``): Python's finalization would otherwise put their default
action back, and a late signal would turn a finished run's exit 0 into 143.

The time budget (``trainer.max_duration``) counts from start-up: from ``catch_stop_signals``
(the first line of ``python train.py``) for a process's first job (``job_budget``), from the
job's own start for the later jobs of a sequential sweep. A watchdog thread (``BudgetWatch``)
notices the moment it runs out: inside interruptible work (start-up included) it sends the
main thread ``BUDGET_SIGNAL`` (``signal.pthread_kill``: a real signal also wakes a blocking
``time.sleep``, socket read or lock wait, which a simulated interrupt would not), whose handler
raises ``StopInterrupt("max_duration")``; work entering ``interruptible()`` later is abandoned
on entry; elsewhere (the update, a checkpoint, every multi-process run) the run stops at the
step's end. A multi-process run stops within the rest of the current step (its sampling and
evaluation included) + one checkpoint write. No SIGALRM: math-verify and user rewards use
``signal.alarm`` for their own timeouts.

In a multi-process run started by ``python train.py`` (``astrai.training.launch``), the
launcher is the process that gets the signal (``docker stop`` signals the container's main
process; the workers run in sessions of their own, so a Ctrl-C reaches the launcher alone):
``astrai.training.stop_forwarder.StopForwarder`` passes it on to every worker once and bounds
their stop by the grace period.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
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
    ``in_run``, a run's loop is going (``StopRequest``); ``starting``, the process is in its
    start-up (``catch_stop_signals`` until a run's ``StopRequest``); ``interruptible``, a stop
    raises ``StopInterrupt`` now (``interruptible()``, and start-up); ``completed``, the stop
    that signal asked for is done; ``budget_spent``, the run's time budget ran out
    (``BudgetWatch``); ``clock_start``, when the first job's budget starts (``time.monotonic``
    at ``catch_stop_signals``; None once a job took it); ``budget``, the job's watch
    (``job_budget``)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.received: str | None = None
        self.in_run = False
        self.starting = False
        self.interruptible = False
        self.completed = False
        self.budget_spent = False
        self.clock_start: float | None = None
        self.budget: BudgetWatch | None = None


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
    if SIGNALS.interruptible and SIGNALS.starting:
        SIGNALS.interruptible = False  # raised once; start-up is being abandoned
        log.warning("%s received during start-up: stopping now (no step taken)", name)
        raise StopInterrupt(name)
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
    (``python train.py`` calls it first thing): during start-up it raises ``StopInterrupt`` at
    once (``end_start_up`` ends that phase; a run's ``StopRequest`` does it too); a second
    kills, one after a completed stop is ignored, and so is one during the interpreter's exit.
    The time budget of the process's first job counts from here (``job_budget``)."""
    if signal.getsignal(signal.SIGTERM) is on_stop_signal:  # already (``train.py``'s first line)
        return
    SIGNALS.clear()
    SIGNALS.clock_start = time.monotonic()
    # one process (or a multi-process run's launcher): a rank of torchrun or of a Slurm job
    # interrupted where it stands could leave the others waiting in a collective; its ranks
    # agree at the loop's start instead (a stop during start-up: no step, exit 0)
    SIGNALS.starting = SIGNALS.interruptible = _one_process()
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


def _one_process() -> bool:
    """Whether this process runs alone (not one rank of torchrun's or a Slurm job's)."""
    return all(int(os.environ.get(name, "1") or 1) <= 1 for name in ("WORLD_SIZE", "SLURM_NTASKS"))


def begin_start_up() -> None:
    """A job's start-up begins (each job of a sequential sweep): under ``catch_stop_signals``
    and before any stop, a signal interrupts it at once again, as the process's first one."""
    on_main = threading.current_thread() is threading.main_thread()
    if on_main and signal.getsignal(signal.SIGTERM) is on_stop_signal and not stop_requested():
        SIGNALS.starting = SIGNALS.interruptible = _one_process()


def end_start_up() -> None:
    """Start-up is over (or abandoned): a stop signal no longer raises where it lands."""
    SIGNALS.starting = SIGNALS.interruptible = False


def stop_requested() -> bool:
    """Whether this process was asked to stop (a signal, or its time budget ran out)."""
    return SIGNALS.received is not None or SIGNALS.budget_spent


@contextlib.contextmanager
def deferred_stop() -> Iterator[None]:
    """A write during start-up (where a stop raises wherever it lands) that must not be cut
    half-way: a stop arriving inside is raised when the block ends."""
    was = SIGNALS.interruptible
    SIGNALS.interruptible = False
    try:
        yield
    finally:
        SIGNALS.interruptible = was and SIGNALS.starting
    if SIGNALS.interruptible and stop_requested():
        end_start_up()
        raise StopInterrupt(SIGNALS.received or BUDGET_REASON)


@contextlib.contextmanager
def job_budget(seconds: float | None) -> Iterator[None]:
    """One job's ``trainer.max_duration`` (``seconds``; None: no budget) under
    ``catch_stop_signals``, watched from start-up: from ``catch_stop_signals`` for the process's
    first job, from now for a later one (a sequential sweep). Spent during start-up, it stops
    the start-up at once (``StopInterrupt("max_duration")``); the run's ``StopRequest`` takes
    the watch over. Elsewhere (a library call, a thread) it does nothing: ``StopRequest``
    watches its own budget."""
    process_wide = signal.getsignal(signal.SIGTERM) is on_stop_signal
    if seconds is None or not process_wide or SIGNALS.budget is not None:
        yield
        return
    started = SIGNALS.clock_start if SIGNALS.clock_start is not None else time.monotonic()
    SIGNALS.clock_start = None  # the next job of a sequential sweep counts from its own start
    SIGNALS.budget_spent = False
    previous = install_handlers({BUDGET_SIGNAL: on_budget_signal})
    if not previous:  # not the main thread: nothing to signal
        yield
        return
    watch = SIGNALS.budget = BudgetWatch(seconds, started)
    try:
        yield
    finally:
        watch.close()
        SIGNALS.budget = None
        SIGNALS.budget_spent = False
        restore_handlers(previous)


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
        job_watch = SIGNALS.budget
        handlers: dict[int, Handler] = dict.fromkeys(STOP_SIGNALS, on_stop_signal)
        if self.max_duration_s is not None and job_watch is None:
            handlers[BUDGET_SIGNAL] = on_budget_signal
        self._previous = install_handlers(handlers)
        previous = [self._previous[s] for s in STOP_SIGNALS if s in self._previous]
        self._process_wide = bool(previous) and all(h is on_stop_signal for h in previous)
        if not self._process_wide:
            SIGNALS.clear()
        end_start_up()  # from here a signal waits for the step's end (or ``interruptible()``)
        SIGNALS.in_run = True
        if self._process_wide and job_watch is not None and self.max_duration_s is not None:
            # the job's budget, watched since start-up (``job_budget``): the same clock
            self._start = job_watch.started
            return self
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
        SIGNALS.in_run = SIGNALS.interruptible = False
        if SIGNALS.budget is None:  # a job's budget (``job_budget``) is its to reset
            SIGNALS.budget_spent = False
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
        seconds: the budget.
        started: when it started (``time.monotonic``); None: now.
    """

    def __init__(self, seconds: float, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self._closed = threading.Event()
        self._main = threading.main_thread().ident
        self._thread = threading.Thread(
            target=self._watch, args=(seconds,), name="astrai-time-budget", daemon=True
        )
        self._thread.start()

    def _watch(self, seconds: float) -> None:
        remaining = max(0.0, self.started + seconds - time.monotonic())
        if self._closed.wait(min(remaining, threading.TIMEOUT_MAX)):
            return
        with _ENTRY_LOCK:
            if self._closed.is_set():
                return
            SIGNALS.budget_spent = True
            abandon = SIGNALS.interruptible and SIGNALS.received is None
            starting = SIGNALS.starting
            if abandon and self._main is not None:
                signal.pthread_kill(self._main, BUDGET_SIGNAL)
        if starting:
            log.warning("trainer.max_duration (%gs) spent during start-up: stopping now", seconds)
            return
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
