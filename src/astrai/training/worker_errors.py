"""A multi-process run's known errors, passed from a worker to its launcher as one line.

A worker of ``launch.launch_workers`` that stops with an error astrai explains in one line (a
``ConfigError``, ``CheckpointError``, ``RewardError`` or ``NonFiniteUpdate``: resuming a
1-process checkpoint with 2 processes, say) writes it to ``<launch dir>/rank_<RANK>.json``
before it fails. Torch elastic then fails the launch with a ``ChildFailedError`` and logs the
worker's traceback; the launcher keeps that log quiet (``quiet_elastic``) and raises the
worker's error again (``worker_error``), which ``python train.py`` prints as it does for a
one-process run: one line, exit 2. Any other failure (a bug) keeps elastic's traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from astrai.checkpoints.layout import CheckpointError
from astrai.config.errors import ConfigError
from astrai.files import write_file_atomic
from astrai.rewards.base import RewardError
from astrai.training.nonfinite import NonFiniteUpdate

# kind -> class: the errors ``astrai.train`` reports in one line
KNOWN_ERRORS: dict[str, type[Exception]] = {
    "config": ConfigError,
    "checkpoint": CheckpointError,
    "reward": RewardError,
    "nonfinite": NonFiniteUpdate,
}
# where torch elastic and torch.multiprocessing log a worker's failure (to handlers of their
# own: torch's loggers do not propagate to the root logger)
ELASTIC_LOGGERS = ("torch.distributed", "torch.multiprocessing")


def _error_file(directory: Path, rank: int | str) -> Path:
    return directory / f"rank_{rank}.json"


def report_worker_error(directory: Path, err: BaseException) -> None:
    """Write ``err`` for the launcher when it is a known error (this worker's ``RANK``)."""
    kind = next((k for k, cls in KNOWN_ERRORS.items() if isinstance(err, cls)), None)
    if kind is None:
        return
    payload = json.dumps({"kind": kind, "message": str(err)})

    def write(tmp: Path) -> None:  # whole or absent: the launcher may read it at any time
        tmp.write_text(payload)

    write_file_atomic(_error_file(directory, os.environ.get("RANK", "0")), write)


def worker_error(directory: Path, first_rank: int | None) -> Exception | None:
    """The known error a worker reported, rebuilt: ``first_rank``'s (the failure elastic saw
    first) when it wrote one, else the lowest rank's; None when none did."""
    files = sorted(directory.glob("rank_*.json"), key=lambda p: int(p.stem.partition("_")[2]))
    first = _error_file(directory, first_rank) if first_rank is not None else None
    if first is not None and first.is_file():
        files.insert(0, first)
    for path in files:
        try:
            payload = json.loads(path.read_text())
            return KNOWN_ERRORS[payload["kind"]](payload["message"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


class _AfterAKnownError(logging.Filter):
    """Drops elastic's records once a worker has reported a known error: its traceback."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(ELASTIC_LOGGERS):
            return True
        return next(self.directory.glob("rank_*.json"), None) is None


@contextlib.contextmanager
def quiet_elastic(directory: Path) -> Iterator[None]:
    """Within the block, torch's log handlers leave out elastic's report of a worker that
    failed with a known error (written to ``directory``)."""
    quiet = _AfterAKnownError(directory)
    handlers = _handlers_of("torch")
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)


def _handlers_of(prefix: str) -> list[logging.Handler]:
    """The handlers of the root logger and of every logger named ``prefix...`` (``torch`` and
    ``torch.distributed`` have their own)."""
    loggers = [logging.getLogger()] + [
        logger
        for name, logger in logging.root.manager.loggerDict.items()
        if name.startswith(prefix) and isinstance(logger, logging.Logger)
    ]
    return list(dict.fromkeys(h for logger in loggers for h in logger.handlers))
