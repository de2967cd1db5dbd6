"""A real 2-job multirun through the joblib launcher (``hydra/launcher=joblib``,
``hydra.launcher.n_jobs=2``): each job in its own loky worker process, with its own run dir,
``train.log``, metrics and TensorBoard run named as a sequential sweep names it, and the same
logged values as the same 2 jobs run one after another by Hydra's basic launcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.train_runs import run_train

from astrai.report.__main__ import main as report_main

JOBS = ["-m", "seed=0,1", "debug=quick", "trainer.total_steps=3", "infra.num_threads=1"]
PARALLEL = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


def _sweep(root: Path, name: str, extra: list[str]) -> Path:
    sweep_dir = root / name
    # threads=None: no OMP_NUM_THREADS from the test, infra.num_threads does the pinning
    result = run_train([*JOBS, *extra, f"hydra.sweep.dir={sweep_dir}"], cwd=root, threads=None)
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir


def _logged(job: Path) -> list[dict[str, float]]:
    """metrics.jsonl without the wall-clock keys (time/..., perf/...)."""
    rows = [json.loads(line) for line in (job / "metrics.jsonl").open()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/"))} for r in rows]


@pytest.mark.slow  # ~30 s on 2 busy cores: two sweeps, the loky workers' start-up
def test_joblib_sweep_runs_the_jobs_side_by_side_with_the_sequential_results(
    tmp_path: Path,
) -> None:
    parallel = _sweep(tmp_path, "parallel", PARALLEL)
    sequential = _sweep(tmp_path, "sequential", [])
    assert (parallel / "multirun.yaml").is_file()
    launcher = (parallel / "multirun.yaml").read_text()
    assert "JoblibLauncher" in launcher and "n_jobs: 2" in launcher
    assert sorted(p.name for p in parallel.iterdir() if p.is_dir()) == ["0", "1"]
    for num in (0, 1):
        job = parallel / str(num)
        assert json.loads((job / "summary.json").read_text())["step"] == 3
        assert (job / "checkpoints" / "step_3").is_dir()
        # the TensorBoard run is named by the swept override, as in a sequential sweep
        assert [p.name for p in (job / "tb").iterdir()] == [f"seed={num}"]
        assert [p.name for p in (sequential / str(num) / "tb").iterdir()] == [f"seed={num}"]
        # the job's own log, with its own banner and the thread count it ran with
        log = (job / "train.log").read_text()
        assert f"run dir {job}" in log and f"run dir {parallel / str(1 - num)}" not in log
        assert "torch intra-op threads: 1 (infra.num_threads=1; jobs side by side: 2)" in log
        assert "jobs side by side: 1)" in (sequential / str(num) / "train.log").read_text()
        steps = _logged(job)
        assert [r["step"] for r in steps] == [0, 1, 2, 3]
        assert steps == _logged(sequential / str(num))
    assert _logged(parallel / "0") != _logged(parallel / "1")  # the seeds differ
    assert report_main([str(parallel)]) == 0
    assert (parallel / "report.csv").read_text().count("done") == 2
