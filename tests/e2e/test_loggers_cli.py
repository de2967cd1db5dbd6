"""``python train.py logger=[tensorboard,wandb,mlflow]``: W&B (offline) and MLflow (its default
SQLite store) hold exactly what ``metrics.jsonl`` holds, and a resumed run continues the same
W&B run and the same MLflow run. Every file W&B writes stays under ``tmp_path`` (its dirs set
by environment); nothing touches the network (offline mode, a local store)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.tracker_records import LOGGERS, assert_same_rows, jsonl_rows, wandb_env
from tests.train_runs import QUICK, run_train_in_process
from tests.wandb_records import history_rows, history_tables, run_files, run_id


@pytest.mark.slow  # ~20 s: two runs (3 steps, then resumed to 5) with W&B and MLflow
def test_wandb_and_mlflow_hold_metrics_jsonl_and_a_resume_continues_their_runs(
    tmp_path: Path,
) -> None:
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    args = [*QUICK, *LOGGERS, "logger.samples_every=2", f"hydra.run.dir={run_dir}"]
    env = wandb_env(tmp_path)
    first = run_train_in_process([*args, "trainer.total_steps=3"], tmp_path, extra_env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    wandb_id = (run_dir / "wandb_run_id").read_text().strip()
    mlflow_id = (run_dir / "mlflow_run_id").read_text().strip()
    resumed = run_train_in_process([*args, "trainer.total_steps=5"], tmp_path, extra_env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    want = jsonl_rows(run_dir)
    assert sorted(want) == [0, 1, 2, 3, 4, 5]

    # W&B: one offline folder per start, both of the one run id; together, metrics.jsonl
    files = run_files(run_dir / "wandb")
    assert len(files) == 2 and [run_id(f) for f in files] == [wandb_id, wandb_id]
    assert (run_dir / "wandb_run_id").read_text().strip() == wandb_id
    segments = [history_rows(f) for f in files]
    assert sorted(segments[0]) == [0, 1, 2, 3] and sorted(segments[1]) == [4, 5]
    assert_same_rows({**segments[0], **segments[1]}, want)
    tables = {**history_tables(files[0]), **history_tables(files[1])}
    assert sorted(k for k in tables if k[1] == "samples/rollout") == [
        (2, "samples/rollout"),
        (4, "samples/rollout"),
    ]
    rollout = tables[4, "samples/rollout"]
    assert rollout["columns"] == ["prompt", "response", "reward"]
    assert len(rollout["data"]) == 4  # the first response of each of 4 prompts (debug=quick)

    # MLflow: the one run, re-opened and finished; every metric's history is metrics.jsonl's
    assert (run_dir / "mlflow_run_id").read_text().strip() == mlflow_id
    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    run = client.get_run(mlflow_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert len(client.search_runs([run.info.experiment_id])) == 1
    names = {name for row in want.values() for name in row}
    got: dict[int, dict[str, float]] = {}
    for name in names:
        for metric in client.get_metric_history(mlflow_id, name):
            assert name not in got.setdefault(metric.step, {}), f"{name} twice at {metric.step}"
            got[metric.step][name] = metric.value
    assert_same_rows(got, want)
    params, tags = run.data.params, run.data.tags
    assert params["trainer.total_steps"] == "3"  # MLflow keeps a param's first value
    assert tags["astrai.resumed_with.trainer.total_steps"] == "5"
    assert params["logger.wandb.project"] == "astrai" and params["seed"] == "0"
    assert tags["astrai.checkpoint_dir"] == str((run_dir / "checkpoints").resolve())
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "wandb").exists()


@pytest.mark.slow  # ~1 s: train.py's start-up up to its config check
def test_logger_wandb_without_wandb_exits_2_with_one_line_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from astrai.config import logger_checks

    monkeypatch.setattr(logger_checks, "is_installed", lambda package: package != "wandb")
    run_dir = tmp_path / "run"
    result = run_train_in_process([*QUICK, "logger=wandb", f"hydra.run.dir={run_dir}"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "astrai: config error: logger=wandb needs the wandb package: pip install 'astrai[wandb]'"
    )
    assert not run_dir.exists()  # nothing written (train.py undoes its start)
