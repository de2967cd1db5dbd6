"""A run dir has one owner: an exclusive ``fcntl`` lock on ``<run dir>/.astrai.lock``, held for
the whole run by the process that runs it (the launcher of a multi-process run; its workers
write under its lock).

A second run into the same dir fails at once, naming the holder's pid and host, before it
writes anything. The kernel drops the lock when its holder exits, however it exits (even
``kill -9``), so a lock file left behind never blocks a later run. Locks are per process and
kept until the process ends: ``python train.py`` takes the lock of an explicit
``hydra.run.dir`` before Hydra writes ``.hydra/`` there, and the job takes the same one again
(a no-op) or, for a timestamped dir or a sweep's job dir, its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

LOCK_NAME = ".astrai.lock"

# run dir (resolved) -> the open lock file: held until this process exits
_HELD: dict[Path, int] = {}


class RunDirBusy(RuntimeError):
    """Another process holds the run dir's lock."""


def lock_run_dir(run_dir: Path) -> None:
    """Take ``run_dir``'s lock for the rest of this process (creating the dir if needed); a
    no-op when this process holds it already.

    Raises:
        RunDirBusy: another process holds it; the message names its pid and host.
        OSError: the dir or its lock file cannot be written (a full disk, no permission),
            naming the path; what this call created is removed again.
    """
    key = run_dir.resolve()
    if key in _HELD:
        return
    created = _missing_dirs(key)
    lock_file = key / LOCK_NAME
    fresh = not lock_file.exists()
    fd = None
    try:
        key.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        _take(fd, run_dir)
    except BaseException as err:
        if fd is not None:
            os.close(fd)
        if not isinstance(err, RunDirBusy):  # a busy dir is another run's: leave it as it is
            _remove_created(lock_file if fresh else None, created)
        if isinstance(err, OSError) and err.filename is None:  # os.pwrite names no path
            raise OSError(err.errno, err.strerror, str(lock_file)) from None
        raise
    _HELD[key] = fd


def _take(fd: int, run_dir: Path) -> None:
    """Lock the open lock file ``fd`` and write its holder into it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "another process"
        raise RunDirBusy(
            f"run dir {run_dir} is in use by {holder}: wait for that run to end, or choose "
            "another hydra.run.dir"
        ) from None
    # written before the old holder's line is cut off: a full disk leaves that line whole
    holder = f"pid {os.getpid()} on {socket.gethostname()}\n".encode()
    os.pwrite(fd, holder, 0)
    os.ftruncate(fd, len(holder))


def _missing_dirs(directory: Path) -> list[Path]:
    """``directory`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    return missing


def _remove_created(lock_file: Path | None, dirs: list[Path]) -> None:
    """Undo a failed start: the lock file (when this call created it), then the dirs it made
    (deepest first; only empty ones)."""
    if lock_file is not None:
        with contextlib.suppress(OSError):
            lock_file.unlink()
    for directory in dirs:
        with contextlib.suppress(OSError):  # not empty: someone else wrote there meanwhile
            directory.rmdir()


def release_run_dir(run_dir: Path) -> None:
    """Give up ``run_dir``'s lock before this process ends (the Python API's run is over and the
    caller may run into that dir again); a no-op when this process does not hold it. The lock
    file stays: the next run takes it."""
    fd = _HELD.pop(run_dir.resolve(), None)
    if fd is not None:
        os.close(fd)  # closing the last descriptor drops the flock
