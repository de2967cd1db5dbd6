"""astrai on a real Slurm cluster (issue 63): two nodes on this host (``tests/clusters/
slurm_cluster.py``), each job two tasks, one per node, one rendezvous. A sweep through
hydra-submitit-launcher and ``astrai.report``; a job requeued mid-run (``scontrol requeue``)
that resumes from its checkpoint to the straight run's weights, bitwise; a job cancelled
(``scancel``) mid-run, which leaves its checkpoint and ``stopped`` in ``summary.json``, and one
cancelled during its start-up, which ends at once.

Needs root and Slurm (``apt-get install slurm-wlm munge``); skipped by name otherwise.
``make test-clusters`` runs it (``-m cluster``); 85-100 s on 2 cores."""

from __future__ import annotations

import csv
import itertools
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from tests.clusters.slurm_cluster import SlurmCluster, launcher_skip_reason, skip_reason
from tests.train_runs import TRAIN, checkpoint_weights, last_logged_step

from astrai.checkpoints.completeness import checkpoint_problems

pytestmark = pytest.mark.cluster

NODE = "slurm:n[1-2]"  # summary.json's node: the job's nodes (astrai.training.node)
# hydra-submitit-launcher on the debug partition, one task (process) per node
SUBMITIT = [
    "hydra/launcher=submitit_slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.tasks_per_node=1",
    "hydra.launcher.timeout_min=10",
    "infra=slurm",
    "infra.device=cpu",
]
# a run long enough to be stopped mid-run (~0.1 s a step), checkpointed only at its end and
# when stopped (the stop's checkpoint is the one a requeue or a cancel leaves)
LONG = ["debug=quick", "trainer.eval_every=100", "ckpt.every_steps=0"]
WAITING = ("PENDING", "CONFIGURING", "RUNNING")  # a job's states before it ends


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as started:
        yield started


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _report(cluster: SlurmCluster, sweep: Path) -> tuple[str, list[dict[str, str]]]:
    """``python -m astrai.report sweep``: its table and the rows of its ``report.csv``."""
    done = subprocess.run(
        [sys.executable, "-m", "astrai.report", str(sweep)],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with (sweep / "report.csv").open() as handle:
        return done.stdout, list(csv.DictReader(handle))


def test_a_sweep_runs_each_job_as_two_tasks_on_two_nodes(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    if (reason := launcher_skip_reason()) is not None:
        pytest.skip(reason)
    sweep = tmp_path / "sweep"
    grid = ["seed=0,1", "train_type.optimizer.lr=0.001,0.002"]
    args = [sys.executable, TRAIN, "-m", *SUBMITIT, "hydra.launcher.nodes=2", *grid, "debug=quick"]
    done = subprocess.run(
        [*args, f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=300,  # ~30 s alone; CI runs it beside the Docker lane
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    for num, (seed, lr) in enumerate(itertools.product((0, 1), ("0.001", "0.002"))):
        job = sweep / str(num)  # Hydra's order: the last override varies fastest
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        assert f"seed={seed}" in overrides and f"train_type.optimizer.lr={lr}" in overrides
        summary = _summary(job)
        assert (summary["step"], summary["stopped"]) == (2, None), summary
        assert summary["node"] == NODE
        assert [row["step"] for row in _rows(job)] == [0, 1, 2]  # rank 0's records, once
        log = (job / "train.log").read_text()
        assert "device: cpu, 2 processes (ddp)" in log and f"lr: {lr}," in log, log
        assert log.count("done: 2 steps") == 1, log  # the other task logs to Slurm's output
    # each job's two tasks (submitit's log of each): ranks 0 and 1, on the job's nodes 0 and 1
    task_logs = sorted(sweep.glob(".submitit/*_*/*_log.out"))
    assert len(task_logs) == 8, task_logs
    for log_file in task_logs:
        task = log_file.name.split("_")[-2]  # <array job>_<index>_<task>_log.out
        started = log_file.read_text()
        assert f"node={task}(2), global_rank={task}(2))" in started, started
    table, rows = _report(cluster, sweep)
    assert table.startswith(f"Sweep {sweep}: 4 jobs"), table
    assert [(r["status"], r["step"], r["node"]) for r in rows] == [("done", "2", NODE)] * 4
    assert sorted((r["seed"], r["train_type.optimizer.lr"]) for r in rows) == [
        ("0", "0.001"), ("0", "0.002"), ("1", "0.001"), ("1", "0.002"),
    ]  # fmt: skip


def _sbatch(cluster: SlurmCluster, folder: Path, run_dir: Path, args: list[str]) -> str:
    """``sbatch`` of a job that runs ``srun python train.py infra=slurm args`` on two nodes,
    one task each, in ``run_dir``; requeueable, its output appended to ``folder/slurm.out``."""
    folder.mkdir(parents=True, exist_ok=True)
    train = [sys.executable, TRAIN, "infra=slurm", "infra.device=cpu", *args]
    script = folder / "job.sh"
    script.write_text(f"#!/bin/bash\nsrun {shlex.join([*train, f'hydra.run.dir={run_dir}'])}\n")
    out = folder / "slurm.out"
    options = ["--parsable", "--requeue", "--nodes=2", "--ntasks-per-node=1", "--open-mode=append"]
    return cluster.run("sbatch", *options, f"--output={out}", str(script), cwd=folder).strip()


def _wait_for_step(run_dir: Path, step: int, alive: Callable[[], bool]) -> int:
    """Wait until ``run_dir`` logged ``step`` (while ``alive()``); the last logged step."""
    deadline = time.monotonic() + 90
    while (logged := last_logged_step(run_dir)) < step:
        assert alive(), f"the run ended before step {step}"
        assert time.monotonic() < deadline, f"no step {step} in 90 s"
        time.sleep(0.05)
    return logged


def test_a_requeued_job_resumes_from_its_checkpoint_to_the_straight_runs_weights(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    args = [*LONG, "trainer.total_steps=80"]
    requeued, straight = tmp_path / "requeued", tmp_path / "straight"
    job = _sbatch(cluster, requeued, requeued / "run", args)
    straight_job = _sbatch(cluster, straight, straight / "run", args)  # side by side
    _wait_for_step(requeued / "run", 3, lambda: cluster.job(job)["JobState"] in WAITING)
    cluster.run("scontrol", "requeue", job)  # Slurm: SIGCONT + SIGTERM to every task
    # back to PENDING, eligible again cred_expire + 1 s later (slurm_cluster.CRED_EXPIRE_S)
    cluster.wait_job(job, 120, JobState="COMPLETED", Restarts="1", ExitCode="0:0")
    cluster.wait_job(straight_job, 120, JobState="COMPLETED", Restarts="0", ExitCode="0:0")

    run = requeued / "run"
    out = (requeued / "slurm.out").read_text()
    assert f"*** JOB {job} ON " in out and "CANCELLED AT" in out and "DUE TO JOB REQUEUE" in out
    log = (run / "train.log").read_text()
    assert "stopped (SIGTERM) at step " in log, log  # the requeue's stop: its checkpoint
    k = int(log.split("stopped (SIGTERM) at step ", 1)[1].split(":", 1)[0])
    assert 3 <= k < 80, log
    checkpoint = run / "checkpoints" / f"step_{k}"
    assert f"resumed from {checkpoint} at step {k}" in log, log
    assert (_summary(run)["step"], _summary(run)["stopped"]) == (80, None)
    assert [row["step"] for row in _rows(run)] == list(range(81))  # steps after k once
    final = Path("checkpoints") / "step_80" / "model.safetensors"
    a, b = checkpoint_weights(straight / "run" / final), checkpoint_weights(run / final)
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def _cancel_a_sweep_job(
    cluster: SlurmCluster, tmp_path: Path, nodes: int, ready: Callable[[Path], bool]
) -> Path:
    """Start a one-job sweep of a long run through submitit (one task on each of ``nodes``
    nodes), ``scancel`` its job once ``ready(job dir)``; the job dir, once the launcher has
    exited 0."""
    sweep = tmp_path / "sweep"
    args = [sys.executable, TRAIN, "-m", *SUBMITIT, f"hydra.launcher.nodes={nodes}"]
    args += [*LONG, "trainer.total_steps=300"]
    launcher = subprocess.Popen(
        [*args, f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not ready(sweep / "0"):
            assert launcher.poll() is None, "the launcher ended before the job could be cancelled"
            assert time.monotonic() < deadline, "the job was not ready in 90 s"
            time.sleep(0.05)
        running = cluster.run("squeue", "--noheader", "--states=RUNNING", "--format=%i").split()
        assert len(running) == 1, running  # this sweep's one job
        cluster.run("scancel", running[0])  # Slurm: SIGCONT + SIGTERM, SIGKILL after KillWait
        out, _ = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, out[-3000:]  # submitit: the job returned
    cluster.wait_job(running[0], 30, JobState="CANCELLED")
    return sweep / "0"


def test_scancel_leaves_the_newest_checkpoint_and_a_stopped_summary(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    if (reason := launcher_skip_reason()) is not None:
        pytest.skip(reason)
    run = _cancel_a_sweep_job(cluster, tmp_path, 2, lambda job: last_logged_step(job) >= 3)
    summary = _summary(run)
    k = summary["step"]
    assert summary["stopped"] == "SIGTERM" and 3 <= k < 300, summary
    checkpoint = run / "checkpoints" / f"step_{k}"
    assert summary["checkpoint"] == str(checkpoint)
    assert sorted(p.name for p in checkpoint.parent.glob("step_*")) == [f"step_{k}"]
    assert checkpoint_problems(checkpoint) == []  # complete: resume would take it
    assert [row["step"] for row in _rows(run)] == list(range(k + 1))
    log = (run / "train.log").read_text()
    assert f"stopped (SIGTERM): {k} steps" in log, log
    table, rows = _report(cluster, run.parent)
    assert "stopped (SIGTERM)" in table, table
    assert [(r["status"], r["step"], r["node"]) for r in rows] == [
        ("stopped (SIGTERM)", str(k), NODE)
    ]


def test_scancel_during_start_up_stops_the_job_at_once(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """submitit's own SIGTERM handler only logs the signal: astrai's replace it as the job
    starts (``astrai.train.run_job``), so a cancel during start-up ends the job at once. Before,
    the job went on to train until Slurm's SIGKILL (KillWait later), and its launcher waited
    for the job's result for ever (no sacct here to say it was cancelled). One task: the
    ranks of a job with several agree on a stop only once their process group is up."""
    if (reason := launcher_skip_reason()) is not None:
        pytest.skip(reason)

    def starting(job: Path) -> bool:
        """The run dir is locked (the handlers are astrai's by then), no step logged yet."""
        return (job / ".astrai.lock").is_file() and last_logged_step(job) < 0

    run = _cancel_a_sweep_job(cluster, tmp_path, 1, starting)
    output = "".join(log.read_text() for log in sorted(run.parent.glob(".submitit/*/*_log.*")))
    assert "SIGTERM received during start-up: stopping now (no step taken)" in output, output
    assert "stopped (SIGTERM) during start-up: no step taken" in output, output
    assert "Bypassing signal SIGTERM" not in output and "Killed" not in output, output
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()
