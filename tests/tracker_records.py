"""What a run's trackers hold, next to ``metrics.jsonl``: W&B's folders kept inside a test's
``tmp_path`` (offline: nothing touches the network), the rows of ``metrics.jsonl``, MLflow's
metric history per step, and a comparison that tells which step and metric differ. W&B's own
files are read by ``tests.wandb_records``."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tests.wandb_records import same_value

LOGGERS = ["logger=[tensorboard,wandb,mlflow]", "logger.wandb.mode=offline"]


def wandb_env(tmp_path: Path) -> dict[str, str]:
    """W&B's own folders (cache, config, data, artifacts) inside ``tmp_path``, offline."""
    home = tmp_path / "wandb-home"
    return {
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(home),
        "WANDB_CACHE_DIR": str(home / "cache"),
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_DATA_DIR": str(home / "data"),
        "WANDB_ARTIFACT_DIR": str(home / "artifacts"),
    }


def jsonl_rows(run_dir: Path) -> dict[int, dict[str, float]]:
    """``metrics.jsonl`` as ``{step: {metric: value}}``, null read as NaN; a step logged twice
    fails (the file is the reference history: one row per step)."""
    rows: dict[int, dict[str, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        step = record.pop("step")
        assert step not in rows, f"step {step} twice in metrics.jsonl"
        rows[step] = {k: math.nan if v is None else float(v) for k, v in record.items()}
    return rows


def mlflow_rows(tracking_uri: str, run_id: str, names: set[str]) -> dict[int, dict[str, float]]:
    """The MLflow run's history of the metrics ``names`` as ``{step: {metric: value}}``; a
    metric with two values at one step fails."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    rows: dict[int, dict[str, float]] = {}
    for name in names:
        for metric in client.get_metric_history(run_id, name):
            assert name not in rows.setdefault(metric.step, {}), f"{name} twice at {metric.step}"
            rows[metric.step][name] = metric.value
    return rows


def assert_same_rows(got: dict[int, dict[str, float]], want: dict[int, dict[str, float]]) -> None:
    """The same steps, metrics and values (NaN equal to NaN)."""
    assert sorted(got) == sorted(want)
    for step, row in want.items():
        assert sorted(got[step]) == sorted(row), f"step {step}"
        bad = [k for k, v in row.items() if not same_value(got[step][k], v)]
        assert not bad, f"step {step}: {[(k, got[step][k], row[k]) for k in bad]}"
