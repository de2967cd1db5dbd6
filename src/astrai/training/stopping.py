"""Graceful stop: SIGTERM/SIGINT and a wall-clock budget end a run at a step boundary.

The first signal asks the trainer to finish the current step, write a checkpoint and exit 0
(what Slurm's preemption, ``docker stop`` and Ctrl-C expect). A second signal restores the
default action and re-raises it, so the process dies at once; checkpoints are written under a
temporary name and renamed, so the last complete one is never damaged.

In a multi-process run started by ``python train.py`` (``astrai.training.launch``), the
launcher is the process that gets the signal (``docker stop`` signals the container's main
process; the workers run in sessions of their own, so a Ctrl-C reaches the launcher alone):
``StopForwarder`` passes it on to every worker once and bounds their stop by the grace period.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType

from astrai.distributed import all_reduce_max

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

Handler = Callable[[int, FrameType | None], None]


def install_handlers(handlers: dict[int, Handler]) -> dict[int, object]:
    """Install ``handlers`` (signal number -> handler); returns the ones they replace. Only the
    main thread may install signal handlers: elsewhere nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}


def restore_handlers(previous: dict[int, object]) -> None:
    """Put back what ``install_handlers`` replaced, and forget it."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)  # type: ignore[arg-type]
    previous.clear()


class StopRequest:
    """Context manager that turns SIGTERM/SIGINT into ``reason`` and watches a time budget.

    Args:
        max_duration_s: wall-clock budget in seconds from ``__enter__``; None = no budget.
    """

    def __init__(self, max_duration_s: float | None = None) -> None:
        self.max_duration_s = max_duration_s
        self.signal_name: str | None = None
        self._start = 0.0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        self._start = time.monotonic()
        self._previous = install_handlers(dict.fromkeys(STOP_SIGNALS, self._handle))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        restore_handlers(self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is not None:
            # second signal: no more grace, die the way the signal says
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signal_name = name
        log.warning("%s received: finishing this step, then checkpoint and exit", name)

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
    agreed = int(all_reduce_max(code))
    return None if agreed == 0 else STOP_REASONS[len(STOP_REASONS) - agreed]
