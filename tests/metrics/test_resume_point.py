"""Where a resumed run's records pick up (``ResumePoint``): the rows ``metrics.jsonl`` keeps,
and the last step handed to W&B and MLflow (kept in the run dir before they get it, marked
closed once they were finished), which decides whether their runs can go on (they hold exactly
the kept rows) or a new run replays the rows. The trackers themselves across a resume:
tests/e2e/test_loggers_resume.py, tests/metrics/test_tracker_amend.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astrai.metrics.run_ids import (
    TRACKED_STEP_FILE,
    TrackedStep,
    read_tracked_step,
    write_tracked_step,
)
from astrai.metrics.writers import ResumePoint, RunLogger, read_resume_point


class TrackedStepSink:
    """Records, at each call, the step it is given and the tracked step the run dir holds."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.calls: list[tuple[str, int, TrackedStep | None]] = []

    def log(self, step: int, values: dict[str, float]) -> None:
        self.calls.append(("log", step, read_tracked_step(self.run_dir)))

    def amend(self, step: int, values: dict[str, float], rows: list[dict[str, float]]) -> None:
        self.calls.append(("amend", step, read_tracked_step(self.run_dir)))
        self.amended_rows = rows

    def log_samples(self, step: int, tag: str, rows: list[tuple[str, str, float]]) -> None:
        self.calls.append(("samples", step, read_tracked_step(self.run_dir)))

    def close(self) -> None:
        pass


def test_each_step_is_kept_as_tracked_before_a_sink_gets_it(tmp_path: Path) -> None:
    sink = TrackedStepSink(tmp_path)
    logger = RunLogger(tmp_path, tensorboard=False, sinks=[sink])
    logger.log(0, {"eval/accuracy": 0.25})
    logger.log_samples(1, "samples/rollout", [("1+1=", "2", 1.0)])  # before step 1's row
    logger.log(1, {"loss/policy": 0.5})
    assert (tmp_path / TRACKED_STEP_FILE).read_text() == "1\n"
    logger.close()
    assert sink.calls == [
        ("log", 0, TrackedStep(0)),
        ("samples", 1, TrackedStep(1)),
        ("log", 1, TrackedStep(1)),
    ]
    assert (tmp_path / TRACKED_STEP_FILE).read_text() == "1 closed\n"
    assert read_tracked_step(tmp_path) == TrackedStep(1, closed=True)


def test_without_sinks_no_step_is_tracked(tmp_path: Path) -> None:
    logger = RunLogger(tmp_path, tensorboard=False)
    logger.log(0, {"eval/accuracy": 0.25})
    logger.close()
    assert read_tracked_step(tmp_path) is None


def _write_rows(run_dir: Path, steps: list[int]) -> None:
    lines = [json.dumps({"step": s, "loss/policy": s / 10, "kl/k1": None}) for s in steps]
    (run_dir / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))


def test_a_resume_point_keeps_the_rows_up_to_the_checkpoint_and_knows_what_was_tracked(
    tmp_path: Path,
) -> None:
    _write_rows(tmp_path, [0, 1, 2, 3])
    write_tracked_step(tmp_path, 4)  # step 4's sample panel went out before the kill
    point = read_resume_point(tmp_path, 2)
    assert [row["step"] for row in point.rows] == [0.0, 1.0, 2.0]
    assert point.rows[1]["loss/policy"] == 0.1 and point.rows[1]["kl/k1"] != point.rows[1]["kl/k1"]
    assert point.tracked == TrackedStep(4) and not point.trackers_hold_exactly_the_rows
    write_tracked_step(tmp_path, 2, closed=True)  # a stop: its checkpoint at its last step
    assert read_resume_point(tmp_path, 2).trackers_hold_exactly_the_rows
    (tmp_path / TRACKED_STEP_FILE).write_text("garbage\n")
    assert read_resume_point(tmp_path, 2).tracked is None
    restart = read_resume_point(tmp_path, -1)  # crashed before its first checkpoint
    assert restart.rows == [] and not restart.trackers_hold_exactly_the_rows


@pytest.mark.parametrize(
    ("tracked", "step", "hold"),
    [
        (TrackedStep(2, closed=True), 2, True),  # a stop at its checkpoint
        (TrackedStep(2), 2, False),  # killed right after its checkpoint: W&B's buffers
        (TrackedStep(3, closed=True), 2, False),  # an error after the checkpoint
        (TrackedStep(3), 2, False),  # killed after the checkpoint
        (TrackedStep(1, closed=True), 2, False),  # they missed rows (a start without them)
        (None, 2, False),  # unknown
        (TrackedStep(-1, closed=True), -1, False),  # a restart before any checkpoint
    ],
)
def test_trackers_go_on_only_after_a_stop_at_the_checkpoint(
    tracked: TrackedStep | None, step: int, hold: bool
) -> None:
    """Otherwise a new run replays what is kept."""
    assert ResumePoint(step, [], tracked).trackers_hold_exactly_the_rows is hold


def test_a_resumed_logger_cuts_the_rows_marks_the_checkpoint_and_hands_amends_the_rows(
    tmp_path: Path,
) -> None:
    _write_rows(tmp_path, [0, 1, 2, 3])
    write_tracked_step(tmp_path, 3)
    sink = TrackedStepSink(tmp_path)
    logger = RunLogger(tmp_path, tensorboard=False, resume_step=2, sinks=[sink])
    # the sinks, opened on it, hold rows 0-2 now, and are open
    assert read_tracked_step(tmp_path) == TrackedStep(2)
    logger.amend(2, {"eval/accuracy": 0.5})
    logger.log(3, {"loss/policy": 3.0})
    logger.close()
    assert sink.calls == [("amend", 2, TrackedStep(2)), ("log", 3, TrackedStep(3))]
    assert [row["step"] for row in sink.amended_rows] == [0.0, 1.0, 2.0]
    assert sink.amended_rows[-1]["eval/accuracy"] == 0.5
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2, 3] and rows[2]["eval/accuracy"] == 0.5
    assert logger.latest["loss/policy"] == 3.0
