"""A run dir has one owner: a second run into it exits 2 at once and writes nothing there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import wait_for_rows

from astrai.paths import REPO_ROOT
from astrai.run_lock import LOCK_NAME, RunDirBusy, lock_run_dir


def test_a_second_process_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    lock_run_dir(tmp_path / "run")  # this process holds it from now on
    lock_run_dir(tmp_path / "run")  # again: a no-op, not a conflict with itself
    code = (
        "import sys; from pathlib import Path\n"
        "from astrai.run_lock import RunDirBusy, lock_run_dir\n"
        "try:\n    lock_run_dir(Path(sys.argv[1]))\n"
        "except RunDirBusy as err:\n    print(err); sys.exit(3)\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True
    )
    assert other.returncode == 3
    assert f"is in use by pid {os.getpid()} on " in other.stdout
    assert (tmp_path / "run" / LOCK_NAME).read_text().startswith(f"pid {os.getpid()} on ")


def test_a_lock_left_by_a_dead_process_does_not_block(tmp_path: Path) -> None:
    holder = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, os; from pathlib import Path; from astrai.run_lock import lock_run_dir; "
            "lock_run_dir(Path(sys.argv[1])); os._exit(0)",  # no clean-up: the kernel releases
            str(tmp_path / "run"),
        ]
    )
    assert holder.returncode == 0 and (tmp_path / "run" / LOCK_NAME).is_file()
    try:
        lock_run_dir(tmp_path / "run")
    except RunDirBusy as err:  # pragma: no cover - the assertion's message
        raise AssertionError(f"a dead holder blocked the run dir: {err}") from err


@pytest.mark.slow  # two real train.py runs: ~15 s
def test_two_concurrent_runs_into_one_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = [
        sys.executable,
        str(REPO_ROOT / "train.py"),
        "debug=quick",
        f"hydra.run.dir={run_dir}",
    ]
    first = subprocess.Popen(
        [*common, "trainer.total_steps=100000", "logger.tensorboard=false"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_rows(first, run_dir / "metrics.jsonl")
    hydra_files = {p: p.read_bytes() for p in (run_dir / ".hydra").iterdir()}
    second = subprocess.run(
        [*common, "seed=5"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert second.returncode == 2
    assert f"astrai: run dir {run_dir} is in use by pid {first.pid} on " in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    # the second run wrote nothing: the first's Hydra record is as it was
    assert {p: p.read_bytes() for p in (run_dir / ".hydra").iterdir()} == hydra_files
    first.send_signal(signal.SIGTERM)
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr[-2000:]
