"""Graceful stop: SIGTERM/SIGINT and a wall-clock budget end a run at a step boundary.

The first signal asks the trainer to finish the current step, write a checkpoint and exit 0
(what Slurm's preemption, ``docker stop`` and Ctrl-C expect). A second signal restores the
default action and re-raises it, so the process dies at once; checkpoints are written under a
temporary name and renamed, so the last complete one is never damaged.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType, TracebackType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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
        # signal handlers can only be installed from the main thread
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

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
