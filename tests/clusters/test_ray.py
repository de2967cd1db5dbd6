"""``hydra/launcher=ray_cluster`` on a real Ray cluster: two raylets of 1 CPU on this host
(``tests/clusters/ray_cluster.py``), a 4-job sweep driven by ``python train.py -m``.

A sweep spreads its jobs over both nodes, each job's ``summary.json`` names its node, and the
report reads 4 done jobs. A raylet killed mid-sweep (once its job has checkpointed) loses that
job: the sweep waits for the others, which complete, and exits 1 naming the lost job; Ray does not
run it again (``max_retries: 0``). With the raylet back, the same command resumes it from its
checkpoint and the report reads 4 done jobs.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clusters.ray_cluster import (
    SECOND,
    RayCluster,
    kill_raylet,
    node_jobs,
    ray_cluster,
    ray_skip_reason,
    restart_node,
)
from tests.train_runs import TRAIN, run_train

from astrai.report.__main__ import main as report_main

SKIP = ray_skip_reason()
pytestmark = [pytest.mark.cluster, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]

JOBS = 4
SWEEP = ["-m", "hydra/launcher=ray_cluster", "infra.device=cpu", "seed=0,1,2,3", "debug=quick"]
# long enough for the second raylet's worker to start (a few seconds) and take jobs
SHORT = ["trainer.total_steps=20", "trainer.eval_every=10"]
# for the kill: a checkpoint every 20 steps (~1 s), 200 steps (~5 s a job) to kill it in
LONG = ["trainer.total_steps=200", "trainer.eval_every=100", "ckpt.every_steps=20"]
BANNER = "astrai: online_grpo on addition, run dir "


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with ray_cluster() as running:
        yield running


def _summary(job: Path) -> dict:
    path = job / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _report_rows(sweep: Path) -> list[dict[str, str]]:
    """``python -m astrai.report <sweep>``'s rows (its ``report.csv``)."""
    assert report_main([str(sweep)]) == 0
    with (sweep / "report.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_a_sweep_runs_on_both_raylets_and_the_report_reads_every_job(
    cluster: RayCluster, tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    result = run_train(
        [*SWEEP, *SHORT, f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        timeout=120,
        extra_env=cluster.driver_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RayClusterLauncher" in (sweep / "multirun.yaml").read_text()
    nodes = []
    for num in range(JOBS):
        job = sweep / str(num)
        summary = _summary(job)
        assert (summary["step"], summary["stopped"]) == (20, None), num
        nodes.append(summary["node"])
        log = (job / "train.log").read_text()
        assert log.count(BANNER) == 1 and f"{BANNER}{job}\n" in log  # its own dir, one start
    assert set(nodes) == {"ray:head", f"ray:{SECOND}"}, nodes  # the jobs used both raylets
    rows = sorted(_report_rows(sweep), key=lambda row: int(row["job"]))
    assert [(r["job"], r["status"], r["node"]) for r in rows] == [
        (str(num), "done", node) for num, node in enumerate(nodes)
    ]


def _wait_for_a_checkpoint(cluster: RayCluster, sweep: Path, driver: subprocess.Popen) -> int:
    """The job the second raylet runs, once it has a checkpoint (and is not done)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert driver.poll() is None, "the sweep ended before the second raylet checkpointed"
        for num in sorted(node_jobs(cluster, SECOND, sweep)):
            checkpoints = list((sweep / str(num) / "checkpoints").glob("step_*"))
            if checkpoints and not (sweep / str(num) / "summary.json").exists():
                return num
        time.sleep(0.2)
    raise AssertionError("no job of the second raylet checkpointed in 90 s")


def _run_and_kill(cluster: RayCluster, sweep: Path, cwd: Path) -> tuple[int, str]:
    """Start the sweep, kill the second raylet once its job has a checkpoint; returns that
    job's number and the sweep's output (stdout + stderr) once it has ended."""
    driver = subprocess.Popen(
        [sys.executable, TRAIN, *SWEEP, *LONG, f"hydra.sweep.dir={sweep}"],
        cwd=cwd,
        env=cluster.driver_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lost = _wait_for_a_checkpoint(cluster, sweep, driver)
        kill_raylet(cluster, SECOND)
        output, _ = driver.communicate(timeout=150)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 1, output[-3000:]
    return lost, output


def test_a_killed_raylet_fails_its_job_and_the_same_command_resumes_it(
    cluster: RayCluster, tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    lost, output = _run_and_kill(cluster, sweep, tmp_path)
    # the sweep names the lost job, its overrides and Ray's error, and says how to resume
    named = f"job {lost} (infra.device=cpu seed={lost} debug=quick "
    assert named in output and ") did not finish: NodeDiedError: " in output, output[-3000:]
    assert "JobLost: job " in output and "resumes it from its last checkpoint" in output
    lost_dir = sweep / str(lost)
    assert _summary(lost_dir) == {}
    assert (lost_dir / "train.log").read_text().count(BANNER) == 1  # not run again by Ray
    step = max(int(p.name.removeprefix("step_")) for p in lost_dir.glob("checkpoints/step_*"))
    for num in set(range(JOBS)) - {lost}:  # the others ran to their end meanwhile
        summary = _summary(sweep / str(num))
        assert (summary["step"], summary["stopped"]) == (200, None), num
    rows = {r["job"]: r for r in _report_rows(sweep)}  # the lost job: failed, not "running"
    assert rows[str(lost)]["status"] == "failed"
    assert "did not finish: NodeDiedError" in (lost_dir / "ray_launcher.log").read_text()
    restart_node(cluster, SECOND)
    result = run_train(
        [*SWEEP, *LONG, f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        timeout=150,
        extra_env=cluster.driver_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = (lost_dir / "train.log").read_text()
    assert f"resumed from {lost_dir}/checkpoints/step_{step} at step {step}" in log
    assert not (lost_dir / "ray_launcher.log").exists()  # the launch cleared the loss
    assert 0 < step < 200 and _summary(lost_dir)["step"] == 200
    rows = _report_rows(sweep)
    assert sorted((r["job"], r["status"]) for r in rows) == [(str(n), "done") for n in range(JOBS)]
