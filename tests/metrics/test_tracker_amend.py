"""A run stopped at its checkpoint with that step's evaluation abandoned: the resumed run adds
the evaluation to the step's row (``RunLogger.amend``). W&B (real, offline) cannot add to a step
its continued run has passed, so a new W&B run replays the rows; MLflow (a real local store: its
file store, which starts in a fraction of its SQLite store's seconds) takes the values at that
step in the same run, once. Each then holds ``metrics.jsonl``'s history."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers import compose_config
from tests.tracker_records import LOGGERS, assert_same_rows, jsonl_rows, mlflow_rows, wandb_env
from tests.wandb_records import files_of_run, visible_history

from astrai.metrics.loggers import open_run_logger


@pytest.mark.slow  # ~3 s: three W&B starts (offline), an MLflow file store
def test_an_evaluation_added_on_resume_reaches_wandb_and_mlflow_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb

    for name, value in wandb_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = (tmp_path / "mlruns").as_uri()
    cfg = compose_config([*LOGGERS, f"logger.mlflow.tracking_uri={store}"], validate=False)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = open_run_logger(cfg, run_dir, resume_step=None, enabled=True)
    for step in range(3):
        first.log(step, {"loss/policy": step / 4})
    first.close()  # stopped at step 2, its checkpoint's, the evaluation abandoned
    wandb_id = (run_dir / "wandb_run_id").read_text().strip()
    mlflow_id = (run_dir / "mlflow_run_id").read_text().strip()

    resumed = open_run_logger(cfg, run_dir, resume_step=2, enabled=True)
    assert (run_dir / "wandb_run_id").read_text().strip() == wandb_id  # continued
    resumed.amend(2, {"eval/accuracy": 0.5})
    resumed.log(3, {"loss/policy": 0.75})
    resumed.close()
    wandb.teardown()  # W&B's service writes the last records of its files as it ends
    want = jsonl_rows(run_dir)
    assert want[2] == {"loss/policy": 0.5, "eval/accuracy": 0.5}

    # the W&B run the run dir names shows metrics.jsonl's history: a new run, which replayed
    # rows 0-2, the evaluation included
    new_id = (run_dir / "wandb_run_id").read_text().strip()
    assert_same_rows(visible_history(files_of_run(run_dir / "wandb", new_id)), want)
    assert new_id != wandb_id
    # MLflow: the same run, re-opened, one value per step of each metric
    assert (run_dir / "mlflow_run_id").read_text().strip() == mlflow_id
    assert_same_rows(mlflow_rows(store, mlflow_id, {"loss/policy", "eval/accuracy"}), want)
