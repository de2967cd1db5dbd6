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
    """
    key = run_dir.resolve()
    if key in _HELD:
        return
    key.mkdir(parents=True, exist_ok=True)
    fd = os.open(key / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise RunDirBusy(
            f"run dir {run_dir} is in use by {holder}: wait for that run to end, or choose "
            "another hydra.run.dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    _HELD[key] = fd
