"""``RunLogger.amend``: a resumed run's evaluation of the step its stop left unevaluated goes
into that step's row (``metrics.jsonl`` and TensorBoard), or a row of its own without one."""

from __future__ import annotations

import json
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from astrai.metrics.writers import RunLogger


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_amend_merges_into_the_last_row_and_appends_after_it(tmp_path: Path) -> None:
    logger = RunLogger(tmp_path, flush_secs=1)
    logger.log(1, {"rollout/reward_mean": 0.5})
    logger.log(2, {"rollout/reward_mean": 0.25})
    logger.amend(2, {"eval/accuracy": 0.75})
    logger.log(3, {"rollout/reward_mean": 1.0})  # the file is open for appending again
    logger.close()
    assert _rows(tmp_path) == [
        {"step": 1, "rollout/reward_mean": 0.5},
        {"step": 2, "eval/accuracy": 0.75, "rollout/reward_mean": 0.25},
        {"step": 3, "rollout/reward_mean": 1.0},
    ]
    assert logger.latest == {"rollout/reward_mean": 1.0, "eval/accuracy": 0.75}
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("eval/accuracy")] == [(2, 0.75)]


def test_without_the_steps_row_amend_logs_one(tmp_path: Path) -> None:
    """metrics.jsonl deleted by hand between the stop and the resume: nothing to merge into."""
    logger = RunLogger(tmp_path, flush_secs=1, resume_step=4)
    logger.amend(4, {"eval/accuracy": 0.5})
    logger.close()
    assert _rows(tmp_path) == [{"step": 4, "eval/accuracy": 0.5}]
