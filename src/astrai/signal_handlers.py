"""Installing and restoring signal handlers, shared by the trainer's stop handling
(``astrai.training.stopping``) and the Docker launcher's signal relay; and how often a blocked
wait looks whether the run was asked to stop (``WAIT_SLICE_S``)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

Handler = Callable[[int, FrameType | None], None]
# the signals that ask a run to stop: checkpoint and exit 0 (docker stop, Slurm, Ctrl-C)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# how often a wait looks whether the run was asked to stop: the training thread's wait for a
# rollout (``training.sampling.overlap``) and a wait for an environment's step, whose thread a stop
# abandons (``envs.tool_limits``)
WAIT_SLICE_S = 0.1


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
