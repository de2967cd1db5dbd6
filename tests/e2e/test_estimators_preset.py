"""``experiment=estimators``: every advantage × loss_agg × seed job of the preset composes and
validates in-process (36 jobs, as ``python train.py`` checks each before its run), and a real
multirun of two of them (cut to 2 steps by debug=quick) runs through the preset, then
``astrai.report --mean-over seed`` reads that sweep. The grouping of many jobs into means is
``tests/report/test_groups.py``'s."""

from __future__ import annotations

import csv
import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests.train_runs import run_train

from astrai.config.compose import check_run_config
from astrai.paths import CONFIG_DIR

ADVANTAGES = ["grpo", "dr_grpo", "rloo", "reinforce_pp"]
LOSS_AGG = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
PRESET = Path(CONFIG_DIR) / "experiment" / "estimators.yaml"


def preset_jobs() -> list[list[str]]:
    """The preset's sweep, one override list per job, as Hydra's basic sweeper expands it."""
    params = OmegaConf.load(PRESET).hydra.sweeper.params
    keys = list(params)
    values = [str(params[key]).split(",") for key in keys]
    return [
        [f"{k}={v}" for k, v in zip(keys, job, strict=True)] for job in itertools.product(*values)
    ]


def test_the_preset_sweeps_every_estimator_aggregation_and_seed() -> None:
    jobs = preset_jobs()
    assert len(jobs) == 36
    assert {job[0] for job in jobs} == {f"train_type.advantage={a}" for a in ADVANTAGES}
    assert {job[1] for job in jobs} == {f"train_type.loss_agg={agg}" for agg in LOSS_AGG}
    assert {job[2] for job in jobs} == {"seed=0", "seed=1", "seed=2"}


@pytest.mark.slow  # 36 composes + validations (~0.3 s each)
def test_every_job_of_the_preset_validates() -> None:
    for job in preset_jobs():
        cfg = check_run_config(["experiment=estimators", *job])
        assert cfg.trainer.total_steps == 400 and cfg.ckpt.every_steps == 0
        assert f"train_type.advantage={cfg.train_type.advantage}" == job[0]
        assert f"train_type.loss_agg={cfg.train_type.loss_agg}" == job[1]


@pytest.mark.slow  # a multirun of two 2-step jobs and the report: ~15 s
def test_two_jobs_of_the_preset_run_and_report(tmp_path: Path) -> None:
    sweep = tmp_path / "estimators"
    result = run_train(
        [
            "-m",
            "experiment=estimators",
            # command-line values replace the preset's for the same keys: 2 of its 36 jobs
            "train_type.advantage=rloo,reinforce_pp",
            "train_type.loss_agg=seq_mean_token_sum_norm",
            "seed=2",
            "debug=quick",
            "logger.tensorboard=false",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.name.isdigit())
    assert len(jobs) == 2
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
    # the report's columns are the overrides that differ between jobs: the advantage only
    assert sorted(g["train_type.advantage"] for g in groups) == ["reinforce_pp", "rloo"]
    assert "train_type.loss_agg" not in groups[0]
    assert all(g["n"] == "1" for g in groups)
    assert (sweep / "report_mean.png").stat().st_size > 0
