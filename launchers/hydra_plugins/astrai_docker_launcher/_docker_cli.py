"""One call of the Docker CLI whose output is read (``ps``, ``inspect``, ``rm``), shared by the
launcher and ``docker/status.py``."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

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
