"""`make tensorboard` serves runs under outputs/ and sweeps under multirun/ in one board: the
Makefile's own command, run against real event files, asked for its runs over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tests.helpers import free_port

from astrai.metrics.writers import RunLogger

REPO = Path(__file__).resolve().parents[2]


def _runs(port: int, timeout_s: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=5) as reply:
                runs = json.loads(reply.read())
            if len(runs) >= 2:
                return sorted(runs)
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail("TensorBoard listed fewer than 2 runs")


def _dry_run(*args: str) -> list[str]:
    """The tensorboard command ``make -n tensorboard args...`` prints, split."""
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "tensorboard", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return next(line for line in dry.stdout.splitlines() if "tensorboard " in line).split()


def test_make_tensorboard_serves_port_6006_unless_told() -> None:
    # docker/docker.mk's PORT (docker-serve's) is empty unless given: the default is the recipe's
    assert _dry_run()[-2:] == ["--port", "6006"]


@pytest.mark.slow  # ~10 s: starts a real TensorBoard
def test_make_tensorboard_serves_outputs_and_multirun(tmp_path: Path) -> None:
    for run_dir in (tmp_path / "outputs" / "a", tmp_path / "multirun" / "s" / "0"):
        logger = RunLogger(run_dir, tensorboard=True, flush_secs=1)
        logger.log(0, {"eval/accuracy": 0.5})
        logger.close()
    port = free_port()
    command = _dry_run(f"PORT={port}")
    assert command[1:4] == ["--logdir_spec", "outputs:outputs,multirun:multirun", "--host"]
    assert command[-2:] == ["--port", str(port)]  # make tensorboard PORT=...
    argv = [sys.executable, "-m", "tensorboard.main", *command[1:]]
    server = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert _runs(port) == ["multirun/s/0/tb", "outputs/a/tb"]
    finally:
        server.terminate()
        server.wait(timeout=30)
