"""Calls of the Docker CLI: one whose output is read (``ps``, ``inspect``, ``rm``), shared by the
launcher and ``docker/status.py``; one whose output streams to the console and a log file (a
job's ``docker compose run``)."""

from __future__ import annotations

import subprocess
import sys
from collections import deque
from collections.abc import Mapping
from pathlib import Path

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


def stream_to_log(
    argv: list[str], env: dict[str, str], cwd: Path, log_file: Path, tail_lines: int
) -> tuple[int, list[str]]:
    """Run ``argv``, echo its output live and into ``log_file``; return (exit code, last
    ``tail_lines`` lines). A missing Docker CLI is exit code 127, as a shell would report."""
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
            )
        except FileNotFoundError as err:
            line = f"{argv[0]}: not found ({err})"
            sink.write(line + "\n")
            return 127, [line]
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sink.write(line)
            tail.append(line.rstrip("\n"))
        return proc.wait(), list(tail)
