"""A known error in a worker of a multi-process run is the launcher's one line: a checkpoint
written by one process, resumed with two, says so in one ``astrai: checkpoint error:`` line and
exits 2, not with torch elastic's 90-line ``ChildFailedError``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from astrai.checkpoints.layout import CheckpointError
from astrai.paths import REPO_ROOT
from astrai.rewards.base import RewardError
from astrai.training.worker_errors import quiet_elastic, report_worker_error, worker_error


def test_a_workers_known_error_comes_back_to_the_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "1")
    report_worker_error(tmp_path, CheckpointError("step_2: world_size=1, this run 2"))
    monkeypatch.setenv("RANK", "0")
    report_worker_error(tmp_path, RewardError("reward raised on '1+2='"))
    first = worker_error(tmp_path, first_rank=1)  # the failure elastic saw first
    assert type(first) is CheckpointError and str(first) == "step_2: world_size=1, this run 2"
    assert type(worker_error(tmp_path, first_rank=None)) is RewardError  # else the lowest rank


def test_any_other_error_is_left_to_elastic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "0")
    report_worker_error(tmp_path, RuntimeError("a bug: keep its traceback"))
    assert list(tmp_path.iterdir()) == []
    assert worker_error(tmp_path, first_rank=0) is None


def test_elastics_report_is_left_out_once_a_worker_has_explained_its_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    # torch's loggers have handlers of their own and do not propagate
    elastic = logging.getLogger("torch.distributed.astrai_test")
    monkeypatch.setattr(elastic, "handlers", [Collect()])
    monkeypatch.setattr(elastic, "propagate", False)
    ours = logging.getLogger("torch.astrai_test_other")  # torch's, but not elastic's
    monkeypatch.setattr(ours, "handlers", elastic.handlers)
    monkeypatch.setattr(ours, "propagate", False)
    with quiet_elastic(tmp_path):
        elastic.error("a worker failed for another reason")
        monkeypatch.setenv("RANK", "0")
        report_worker_error(tmp_path, CheckpointError("world_size=1, this run 2"))
        elastic.error("failed (exitcode: 1) ... Traceback")
        ours.error("kept")
    elastic.error("after the launch")
    assert records == ["a worker failed for another reason", "kept", "after the launch"]


def _train(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.slow  # a 1-process run, then 2 spawned gloo workers: 15-30 s on 2 cores
def test_a_one_process_checkpoint_resumed_with_two_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    common = ["debug=quick", "infra.device=cpu", "ckpt.every_steps=1", f"hydra.run.dir={run_dir}"]
    first = _train([*common, "trainer.total_steps=1"], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    record = {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()}
    resumed = _train([*common, "trainer.total_steps=2", "infra.nproc_per_node=2"], tmp_path)
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    lines = resumed.stderr.strip().splitlines()
    assert len(lines) == 1, resumed.stderr[-3000:]
    assert lines[0].startswith(f"astrai: checkpoint error: {run_dir}/checkpoints/step_1/")
    assert "world_size=1, this run 2" in lines[0]
    # refused before any work: the run is as the first process left it
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == checkpoints
    assert {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()} == record
