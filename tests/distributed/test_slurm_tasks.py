"""A Slurm job's tasks are one run: each task is one ``python train.py infra=slurm`` process with
its rank in ``SLURM_PROCID`` (as ``srun`` and hydra-submitit-launcher start them), no torchrun.
Here two real processes on the CPU, gloo over localhost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import free_port
from tests.train_runs import TRAIN


@pytest.mark.slow  # ~13 s: two interpreters, a 2-step run each
def test_two_slurm_tasks_train_one_run_in_one_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["infra=slurm", "infra.device=cpu", "debug=quick", f"hydra.run.dir={run_dir}"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(
        OMP_NUM_THREADS="1", SLURM_NTASKS="2", SLURM_JOB_NODELIST="localhost",
        SLURM_JOB_ID="77", MASTER_PORT=str(free_port()),
    )  # fmt: skip
    tasks = [
        subprocess.Popen(
            [sys.executable, TRAIN, *args],
            cwd=tmp_path,
            env={**env, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        outputs = [task.communicate(timeout=180)[0] for task in tasks]
    finally:  # a task left waiting for its peer in the process group
        for task in tasks:
            task.kill()
    # before: each task took itself for rank 0 and locked the run dir; the second exited 2
    # ("is in use by") and the first waited for it in the process group
    assert [task.returncode for task in tasks] == [0, 0], outputs
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["step"], summary["stopped"]) == (2, None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]  # rank 0's records, once
    log = (run_dir / "train.log").read_text()
    assert log.count("done: 2 steps") == 1, log  # task 1 does not write the job log
