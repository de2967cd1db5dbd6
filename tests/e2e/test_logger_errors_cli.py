"""``python train.py`` with a logger that cannot start: one line on stderr, exit code 2, and the
run dir (``.hydra/``, ``.astrai.lock``, the job log, anything the logger made) gone. Refused at
configuration where the library's rule is known (an MLflow URI without a store, a SQLite store
that cannot be written, a W&B tag over 64 characters); a logger that passes them and still
fails (an MLflow server that does not answer) is ``LoggerStartError``, mapped the same way."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.tracker_records import LOGGERS, wandb_env
from tests.train_runs import QUICK, run_train_in_process

MLFLOW = ["logger=[tensorboard,mlflow]"]


def _refused(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> str:
    """Run ``train.py args`` into ``tmp_path/run``; assert exit 2 and nothing left behind;
    return the one line on stderr."""
    run_dir = tmp_path / "run"
    result = run_train_in_process(
        [*QUICK, *args, f"hydra.run.dir={run_dir}"], tmp_path, extra_env=env
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert not run_dir.exists(), sorted(p.name for p in run_dir.iterdir())
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


@pytest.mark.slow  # ~1 s: train.py's start-up up to its config check
def test_an_mlflow_uri_of_an_unknown_scheme_is_one_line(tmp_path: Path) -> None:
    line = _refused([*MLFLOW, "logger.mlflow.tracking_uri=banana://x"], tmp_path)
    assert line.startswith(
        "astrai: config error: logger.mlflow.tracking_uri=banana://x: MLflow has no store for "
        "the scheme 'banana' (it takes http://, https://, databricks://, sqlite://"
    )


@pytest.mark.slow  # ~1 s, where MLflow retried for a minute and a half
def test_an_mlflow_sqlite_store_that_cannot_be_written_is_one_line_at_once(
    tmp_path: Path,
) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder\n")
    uri = f"sqlite:///{a_file}/mlflow.db"
    start = time.monotonic()
    line = _refused([*MLFLOW, f"logger.mlflow.tracking_uri={uri}"], tmp_path)
    assert time.monotonic() - start < 30
    assert line == (
        f"astrai: config error: logger.mlflow.tracking_uri={uri}: its folder cannot be made: "
        f"{a_file} is not a folder"
    )


@pytest.mark.slow  # ~1 s
def test_a_wandb_tag_over_64_characters_is_one_line(tmp_path: Path) -> None:
    tag = "t" * 65
    line = _refused(["logger=wandb", f"logger.wandb.tags=[ok,{tag}]"], tmp_path)
    assert line == (
        "astrai: config error: logger.wandb.tags[1] must be 1 to 64 characters, as W&B "
        "requires (got 65: 'tttttttttttttttttttt...')"
    )


@pytest.mark.slow  # ~3 s: the run is built up to its logger
def test_an_mlflow_server_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    """A closed port (MLflow's retries turned off here: it would retry for minutes); W&B, which
    starts after MLflow, never prints its banner."""
    env = {**wandb_env(tmp_path), "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    args = [*LOGGERS, "logger.mlflow.tracking_uri=http://127.0.0.1:9"]
    line = _refused(args, tmp_path, env)
    assert line.startswith(
        "astrai: logger error: logger=mlflow cannot start: MlflowException: API request to "
        "http://127.0.0.1:9/api/2.0/mlflow/experiments/get-by-name failed with exception "
    ), line


@pytest.mark.slow  # ~5 s: the run is built up to its loggers, MLflow's store made
def test_wandb_without_a_login_is_one_line_and_mlflows_files_go_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W&B online without an API key fails at once; MLflow, opened before it, had made its
    store and run in the run dir: removed with the rest."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc login either
    line = _refused([*LOGGERS, "logger.wandb.mode=online"], tmp_path, wandb_env(tmp_path))
    assert line == (
        "astrai: logger error: logger=wandb cannot start: UsageError: No API key configured. "
        "Use `wandb login` to log in."
    )
