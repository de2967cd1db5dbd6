"""The launcher of a multi-process run passes SIGTERM/SIGINT on to its workers
(``StopForwarder``): they stop the way ``astrai.training.stopping.StopRequest`` says, and the
grace period bounds their stop.

In a multi-process run started by ``python train.py`` (``astrai.training.launch``), the
launcher is the process that gets the signal (``docker stop`` signals the container's main
process; the workers run in sessions of their own, so a Ctrl-C reaches the launcher alone).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from types import FrameType, TracebackType

from astrai.signal_handlers import STOP_SIGNALS, Handler, install_handlers, restore_handlers

log = logging.getLogger(__name__)


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
