"""Calls of the Docker CLI: one whose output is read (``ps``, ``inspect``, ``rm``), shared by the
launcher and ``docker/status.py``; one whose output streams to the console and a log file (a
job's ``docker compose run``)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from types import FrameType, TracebackType

from astrai.signal_handlers import STOP_SIGNALS, install_handlers, restore_handlers

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0


class DockerCallError(Exception):
    """The CLI could not run, timed out or exited non-zero; the message is one line."""


def docker_output(docker: str, *args: str, env: Mapping[str, str] | None = None) -> str:
    """``docker ARGS...``'s stdout; DockerCallError with the CLI's first error line."""
    try:
        result = subprocess.run(
            [docker, *args],
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise DockerCallError(f"docker {args[0]}: {err}") from err
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
        raise DockerCallError(f"docker {' '.join(args[:2])}: {lines[0]}")
    return result.stdout


class SignalRelay:
    """While a sweep's containers run: the first SIGTERM or SIGINT to the launcher is recorded
    (``received``: no further job starts) and passed on to the running ``docker compose run``,
    which hands it to the container, where train.py finishes its step, checkpoints and exits 0.
    That child runs in a session of its own (``stream_to_log``), so a terminal's Ctrl-C reaches
    the launcher alone and the container hears each signal once. The handler it replaces runs
    after (train.py's: a second signal ends this process, after the container got it too)."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._child: subprocess.Popen[str] | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> SignalRelay:
        self._previous = install_handlers(dict.fromkeys(STOP_SIGNALS, self._handle))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        restore_handlers(self._previous)

    def attach(self, child: subprocess.Popen[str] | None) -> None:
        """The running ``docker compose`` (None once it ended); one that starts after a signal
        came is passed that signal at once."""
        self._child = child
        if child is not None and self.received is not None:
            child.send_signal(signal.Signals[self.received])

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        first = self.received is None
        if first:
            self.received = name
            log.warning(
                "%s received: passed on to the running container; no job starts after it", name
            )
        if self._child is not None:
            self._child.send_signal(signum)  # a no-op once the child has ended
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL and not first:  # no one else handles it: die by it
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)


def stream_to_log(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    log_file: Path,
    tail_lines: int,
    relay: SignalRelay | None = None,
) -> tuple[int, list[str]]:
    """Run ``argv``, echo its output live and into ``log_file``; return (exit code, last
    ``tail_lines`` lines). A missing Docker CLI is exit code 127, as a shell would report.
    With a ``relay``, the child runs in a session of its own and gets the stop signals through
    it."""
    tail: deque[str] = deque(maxlen=tail_lines)
    with open(log_file, "a", encoding="utf-8") as sink:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",  # a container's output need not be UTF-8
                bufsize=1,
                start_new_session=relay is not None,
            )
        except FileNotFoundError as err:
            line = f"{argv[0]}: not found ({err})"
            sink.write(line + "\n")
            return 127, [line]
        if relay is not None:
            relay.attach(proc)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                sink.write(line)
                tail.append(line.rstrip("\n"))
            return proc.wait(), list(tail)
        finally:
            if relay is not None:
                relay.attach(None)
