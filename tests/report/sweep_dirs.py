"""Hand-made sweep job dirs for the ``astrai.report`` tests: ``.hydra`` overrides, metrics rows,
a job log and an optional ``summary.json``."""

from __future__ import annotations

import json
from pathlib import Path


def make_job(
    sweep: Path,
    name: str,
    overrides: list[str],
    rows: list[dict],
    summary: dict | None = None,
    log: str = "[2026-01-01 00:00:00,000][astrai.train][INFO] - started\n",
) -> Path:
    job = sweep / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (job / ".hydra" / "config.yaml").write_text(
        "optimized_metric: eval/accuracy\ntrainer:\n  total_steps: 4\n"
    )
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (job / "train.log").write_text(log)
    if summary is not None:
        (job / "summary.json").write_text(json.dumps(summary))
    return job


def make_rows(accuracies: list[float], reward: float) -> list[dict]:
    rows = [{"step": 0, "eval/accuracy": accuracies[0]}]
    for step, acc in enumerate(accuracies[1:], start=1):
        rows.append(
            {"step": step, "rollout/reward_mean": reward * step, "eval/accuracy": acc,
             "time/elapsed_s": 1.5 * step}
        )  # fmt: skip
    return rows


def make_summary(rows: list[dict], **extra: object) -> dict:
    last = {k: v for r in rows for k, v in r.items()}
    return {**last, "wall_time_s": 99.0, "stopped": None, **extra}
