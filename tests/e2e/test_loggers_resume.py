"""W&B and MLflow across a resume that goes back: ``kill -9`` after step 3 with the last
checkpoint at step 2, resumed to step 5 — each logger's run (the one the run dir names) holds
exactly ``metrics.jsonl``'s history, one value per step, although the killed run handed them
step 3 (and W&B a panel at step 4) first. W&B is read back from its offline files under its own
rule (a row at a step the run has passed is dropped: ``visible_history``), MLflow from its
SQLite store with its client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.tracker_records import LOGGERS, assert_same_rows, jsonl_rows, mlflow_rows, wandb_env
from tests.train_runs import QUICK, REPO, run_train_in_process
from tests.wandb_records import files_of_run, history_rows, run_files, run_id, visible_history

ARGS = [
    *QUICK,
    *LOGGERS,
    "trainer.total_steps=5",
    "ckpt.every_steps=2",
    "logger.samples_every=2",  # a panel at step 4, logged before its row: where it is held
]
HOLD_STEP = 4


def _kill_after_step_3(run_dir: Path, cwd: Path, env: dict[str, str]) -> None:
    """``train.py`` held right after step 4's sample panel (step 3's row logged, the
    checkpoint at step 2 written), W&B's file holding step 3; then SIGKILL."""
    marker = cwd / "held"
    full_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    full_env.update(env, OMP_NUM_THREADS="1", ASTRAI_HOLD_STEP=str(HOLD_STEP))
    # W&B writes its file every 15 s (``x_transaction_log_flush_interval``): at once here
    full_env["WANDB__TRANSACTION_LOG_FLUSH_INTERVAL"] = "0.1"
    full_env["ASTRAI_HOLD_MARKER"] = str(marker)
    script = REPO / "tests" / "e2e" / "held_log_train.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), *ARGS, f"hydra.run.dir={run_dir}"],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (marker.is_file() and _wandb_holds_step_3(run_dir)):
            assert proc.poll() is None, f"exited {proc.returncode}: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "the run never got past step 3"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wandb_holds_step_3(run_dir: Path) -> bool:
    """The held run's W&B file has step 3's row (W&B writes a step's row once a later step
    arrives: here, step 4's panel)."""
    files = run_files(run_dir / "wandb")
    try:
        return len(files) == 1 and 3 in history_rows(files[0])
    except AssertionError:  # a record being written
        return False


@pytest.mark.slow  # ~20 s: a run killed after step 3, resumed to step 5
def test_after_kill_9_each_logger_holds_metrics_jsonl_one_value_per_step(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    run_dir, env = tmp_path / "run", wandb_env(tmp_path)
    _kill_after_step_3(run_dir, tmp_path, env)
    assert sorted(jsonl_rows(run_dir)) == [0, 1, 2, 3]
    assert [p.name for p in (run_dir / "checkpoints").glob("step_*")] == ["step_2"]
    killed_wandb = (run_dir / "wandb_run_id").read_text().strip()
    killed_mlflow = (run_dir / "mlflow_run_id").read_text().strip()

    resumed = run_train_in_process([*ARGS, f"hydra.run.dir={run_dir}"], tmp_path, extra_env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    want = jsonl_rows(run_dir)  # the reference: one row per step, step 3 the resumed run's
    assert sorted(want) == [0, 1, 2, 3, 4, 5]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 6

    # W&B: the run the dir names shows metrics.jsonl's history (W&B's rule: a row at a step the
    # run has passed is dropped); it is a new run, named as the first, which keeps its step 3
    wandb_id = (run_dir / "wandb_run_id").read_text().strip()
    assert_same_rows(visible_history(files_of_run(run_dir / "wandb", wandb_id)), want)
    assert wandb_id != killed_wandb
    assert [run_id(f) for f in run_files(run_dir / "wandb")] == [killed_wandb, wandb_id]
    assert 3 in history_rows(files_of_run(run_dir / "wandb", killed_wandb)[0])

    # MLflow: the run the dir names has one value per step of every metric, metrics.jsonl's;
    # it is a new run (the killed one marked KILLED, the two linked by tags)
    mlflow_id = (run_dir / "mlflow_run_id").read_text().strip()
    uri = f"sqlite:///{run_dir / 'mlflow.db'}"
    names = {name for row in want.values() for name in row}
    assert_same_rows(mlflow_rows(uri, mlflow_id, names), want)
    client = MlflowClient(tracking_uri=uri)
    run, killed = client.get_run(mlflow_id), client.get_run(killed_mlflow)
    assert mlflow_id != killed_mlflow
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert run.data.tags["astrai.continues"] == killed_mlflow
    assert killed.info.status == "KILLED"
    assert killed.data.tags["astrai.continued_by"] == mlflow_id
