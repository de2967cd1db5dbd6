"""The machine saying no during a run (a full disk, a path that cannot be written): one line,
exit 2, and the run dir keeps what the run did so far."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.train_runs import run_train


def _train(run_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    return run_train(["debug=quick", f"hydra.run.dir={run_dir}"], cwd, timeout=180)


@pytest.mark.slow  # ~5 s each: one train.py run
def test_a_full_disk_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # every write to /dev/full fails with ENOSPC: the run's config.yaml lands on a "full disk"
    (run_dir / "config.yaml").symlink_to("/dev/full")
    result = _train(run_dir, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == ["astrai: I/O error: No space left on device"]


@pytest.mark.slow
def test_a_checkpoint_dir_that_cannot_be_made_is_one_line_naming_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").write_text("a file where the run's checkpoints/ would go")
    result = _train(run_dir, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("astrai: I/O error: ") and str(run_dir / "checkpoints") in line, line
