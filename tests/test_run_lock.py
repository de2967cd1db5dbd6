"""A run dir has one owner: a second run into it exits 2 at once and writes nothing there."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import wait_for_rows

from astrai import run_lock
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


# --- a full disk before the run ---------------------------------------------------------------


def _disk_full(*_: object) -> int:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as os.pwrite raises it: no path


def test_a_full_disk_names_the_lock_file_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "outputs" / "run"
    monkeypatch.setattr(run_lock.os, "pwrite", _disk_full)
    with pytest.raises(OSError) as caught:
        lock_run_dir(run_dir)
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(run_dir.resolve() / LOCK_NAME)
    assert list(tmp_path.iterdir()) == []  # the dirs it made are gone again
    monkeypatch.undo()
    lock_run_dir(run_dir)  # nothing half-held: the same dir locks once the disk has room
    assert (run_dir / LOCK_NAME).read_text().startswith(f"pid {os.getpid()} on ")


def test_a_full_disk_keeps_an_earlier_runs_dir_and_lock_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_NAME).write_text("pid 1 on elsewhere\n")
    monkeypatch.setattr(run_lock.os, "pwrite", _disk_full)
    with pytest.raises(OSError):
        lock_run_dir(tmp_path / "run")
    assert (tmp_path / "run" / LOCK_NAME).read_text() == "pid 1 on elsewhere\n"


def test_train_py_says_one_line_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``main`` in-process: the lock of an explicit run dir is taken before Hydra starts."""
    import astrai.train

    run_dir = tmp_path / "run"
    monkeypatch.setattr(astrai.train, "catch_stop_signals", lambda: None)  # pytest's own
    monkeypatch.setattr(sys, "argv", ["train.py", f"hydra.run.dir={run_dir}"])
    monkeypatch.setattr(run_lock.os, "pwrite", _disk_full)
    with pytest.raises(SystemExit) as caught:
        astrai.train.main()
    assert caught.value.code == 2
    lock_file = run_dir.resolve() / LOCK_NAME
    assert capsys.readouterr().err == f"astrai: I/O error: {lock_file}: No space left on device\n"
    assert list(tmp_path.iterdir()) == []
