"""Worker processes started from a forkserver, for user code that a hard timeout must be able to
end: the reward worker (``astrai.rewards.worker``) and the environment hosts
(``astrai.envs.hosts``).

Python cannot stop a thread, and C code that holds the GIL (a regex that backtracks
catastrophically, SymPy's big integers) cannot even be interrupted by a signal: only a process
can be killed. The trainer has threads, so a plain fork could copy a held lock; a forkserver
child forks from a clean single-threaded server that preloaded the modules its workers run, so a
start costs milliseconds. There is one server per set of preloaded modules (and their files),
each exiting with this process. A worker is not re-run from ``__main__`` (``ForkserverPopen``)
and dies with its forkserver, so with the trainer, a ``kill -9`` of it included
(``die_with_parent``: no orphan).

``ForkserverPopen`` overrides a private method of CPython's ``multiprocessing``, written against
3.11's (what CI runs). At the first start the override checks that the method it replaces is
that one (``launch_override_applies``); on a Python whose method differs, workers start through
the plain forkserver instead, with one warning: they then re-run the main module's top level and
start without the preloaded modules, but still end on a timeout.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import inspect
import io
import os
import signal
import sys
import threading
import warnings

# importing ``util`` registers multiprocessing's exit handler (it joins children): a module that
# imports this one and then registers its own ``atexit`` kill has it run first
from multiprocessing import context, forkserver, popen_forkserver, reduction, spawn, util
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# sha256 of ``inspect.getsource(popen_forkserver.Popen._launch)`` in the versions
# ``ForkserverPopen._launch`` was written against and tested on (CI's)
OVERRIDDEN_LAUNCH_SHA256 = {
    "214844899bd3407f72082111e993b40f7c271620be27195b878ea1e44a5f3837": "3.11",
}

# one forkserver per set of preloaded modules, each exiting with this process
_servers: dict[tuple[tuple[str, str | None], ...], forkserver.ForkServer] = {}
_servers_lock = threading.Lock()


def forkserver_for(preload: tuple[str, ...]) -> forkserver.ForkServer:
    """The forkserver preloading ``preload``; one per set of modules *and their files* (a test
    writes a module of the same name into each of its directories: each gets its own)."""
    key = tuple((name, getattr(sys.modules.get(name), "__file__", None)) for name in preload)
    with _servers_lock:
        server = _servers.get(key)
        if server is None:
            server = _servers[key] = forkserver.ForkServer()
            server.set_forkserver_preload(list(preload))
    return server


class ForkserverPopen(popen_forkserver.Popen):
    """The forkserver's ``Popen`` without the child's re-run of ``__main__``: a worker needs
    none of it (what it runs is imported by its path), and a script without a ``__main__``
    guard would run again in every worker. Otherwise ``popen_forkserver.Popen._launch``
    (3.11)."""

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)  # noqa: SLF001
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        # the parent's start method may be one the child cannot name (joblib's "loky", in a
        # sweep job run by the joblib launcher): the worker starts none of its own anyway
        prep_data.pop("start_method", None)
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)
        server = forkserver_for(process_obj.preload)
        self.sentinel, w = server.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        parent_w = os.dup(w)  # the child watches it: EOF = this process is gone
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


def launch_fingerprint() -> str | None:
    """sha256 of this Python's ``popen_forkserver.Popen._launch`` source; None when its
    source cannot be read (a build without the standard library's ``.py`` files)."""
    try:
        source = inspect.getsource(popen_forkserver.Popen._launch)  # type: ignore[attr-defined]  # noqa: SLF001
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode()).hexdigest()


@functools.cache
def launch_override_applies() -> bool:
    """Whether ``ForkserverPopen`` may replace this Python's ``Popen._launch``: the method is
    the one it was written against. Otherwise one warning, and the plain forkserver."""
    if launch_fingerprint() in OVERRIDDEN_LAUNCH_SHA256:
        return True
    version = sys.version.split()[0]
    warnings.warn(
        f"astrai: Python {version}'s multiprocessing.popen_forkserver.Popen._launch is not the"
        f" one astrai's worker processes were written against (Python"
        f" {', '.join(sorted(set(OVERRIDDEN_LAUNCH_SHA256.values())))}); reward and environment"
        " workers start through the plain forkserver: they re-run your script's top level"
        " (keep it under `if __name__ == '__main__':`) and start slower",
        RuntimeWarning,
        stacklevel=3,
    )
    return False


class ForkserverProcess(context.ForkServerProcess):
    """A process started from the forkserver that preloads ``preload`` (set before
    ``start``); from the plain forkserver where ``launch_override_applies`` says no."""

    preload: tuple[str, ...] = ()

    @staticmethod
    def _Popen(process_obj: Any) -> popen_forkserver.Popen:  # noqa: N802 (multiprocessing's)
        if launch_override_applies():
            return ForkserverPopen(process_obj)
        return popen_forkserver.Popen(process_obj)


def sigkill(process: ForkserverProcess) -> None:
    """SIGKILL ``process`` unless it was never started or has been reaped; from any thread,
    and from a signal handler (it only sends a signal)."""
    popen = process._popen  # type: ignore[attr-defined]  # noqa: SLF001
    if process.pid is not None and popen is not None:
        with contextlib.suppress(ProcessLookupError, OSError, ValueError):
            if popen.returncode is None:
                os.kill(process.pid, signal.SIGKILL)


def die_with_parent() -> None:
    """SIGKILL this worker when its parent (the forkserver, which exits with the trainer)
    dies, even while a call holds the GIL in C code (Linux; elsewhere EOF on the pipe).

    The forkserver exits when the trainer's end of its "alive" pipe closes; multiprocessing
    hands every child a copy of that end (for forkserver children of its own), which would
    keep the server, and so this worker, alive after the trainer: closed here."""
    alive_fd = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)  # noqa: SLF001
    if alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(alive_fd)
        forkserver._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]  # noqa: SLF001
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
