"""``experiment=estimators`` end to end: the real multirun of every advantage × loss_agg × seed
job (cut to 2 steps each by debug=quick), then ``astrai.report --mean-over seed`` over it."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from tests.train_runs import run_train

ADVANTAGES = {"grpo", "dr_grpo", "rloo", "reinforce_pp"}
LOSS_AGG = {"token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"}


@pytest.mark.slow  # 36 jobs of 2 steps in one process: ~1–2 minutes
def test_estimators_preset_runs_every_job_and_reports_them(tmp_path: Path) -> None:
    sweep = tmp_path / "estimators"
    result = run_train(
        [
            "-m",
            "experiment=estimators",
            "debug=quick",
            "logger.tensorboard=false",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.name.isdigit())
    assert len(jobs) == 36
    assert all((job / "summary.json").is_file() for job in jobs)

    report = subprocess.run(
        [sys.executable, "-m", "astrai.report", str(sweep), "--mean-over", "seed"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    with (sweep / "report_mean.csv").open() as f:
        groups = list(csv.DictReader(f))
    assert len(groups) == 12
    assert {g["train_type.advantage"] for g in groups} == ADVANTAGES
    assert {g["train_type.loss_agg"] for g in groups} == LOSS_AGG
    assert all(g["n"] == "3" for g in groups)
    assert (sweep / "report_mean.png").stat().st_size > 0
