"""A SIGTERM to a sequential sweep stops the sweep, not only its running job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import wait_for_rows

from astrai.paths import REPO_ROOT


@pytest.mark.slow  # a real 2-job multirun stopped mid-job: ~15 s
def test_sigterm_stops_the_sweep_after_the_running_job_checkpoints(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [
        sys.executable,
        str(REPO_ROOT / "train.py"),
        "-m",
        "seed=0,1",
        "debug=quick",
        "trainer.total_steps=100000",  # only the signal ends job 0
        "logger.tensorboard=false",
        f"hydra.sweep.dir={sweep}",
    ]
    process = subprocess.Popen(args, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    wait_for_rows(process, sweep / "0" / "metrics.jsonl")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)

    assert process.returncode == 0, stderr[-2000:]
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert summary["stopped"] == "SIGTERM" and summary["checkpoint"] is not None
    assert not (sweep / "1").exists()  # the basic launcher never started job 1
    log = (sweep / "0" / "train.log").read_text()
    assert "sweep stopped (SIGTERM) at job 0; the same command resumes it" in log
