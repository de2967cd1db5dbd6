"""A selected logger (W&B, MLflow) that cannot start is one ``LoggerStartError``: one line naming
the logger and its library's reason, raised before the run writes anything; what the attempt
created in the run dir is removed again. (Kept apart from the sinks: ``astrai.train`` catches it
without importing them.)"""

from __future__ import annotations

import shutil
from pathlib import Path


class LoggerStartError(RuntimeError):
    """A logger could not start (or, mid-run, start the new run a resume needs); the message
    is one line: ``logger=<name> cannot start: <reason>``."""


def one_line(err: BaseException) -> str:
    """``err`` as ``Type: first line of its message`` (libraries' messages span lines)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def remove_paths(paths: list[Path]) -> None:
    """Remove each of ``paths`` that exists (a folder with what it holds)."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
