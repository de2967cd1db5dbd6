"""A resume with a larger ``trainer.total_steps`` says what it does to the learning-rate curve in
one line, and offers both curves (``ckpt.resume_schedule``): ``rescale`` (the schedule spans
the new total) and ``keep`` (the old curve) (issue 32, 5).

Hand-computed, one optimizer step per RL step (``ppo_epochs=minibatches=1``), warmup_cosine
with 0 warmup and ``min_lr_ratio`` 0.1: factor(k, T) = 0.1 + 0.9·½(1 + cos(π·min(1, k/T))).
The first run ends at k = 2 of T = 2 (factor 0.1). Resumed with total_steps=4, step 3 logs
the lr after k = 3: rescaled, factor(3, 4) = 0.1 + 0.45·(1 − √½) = 0.231802; kept,
factor(3, 2) = 0.1."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from tests.helpers import compose_config

from astrai.training.run import Run

RUN = [
    "debug=quick",
    "trainer.eval_every=2",
    "train_type.ppo_epochs=1",
    "train_type.minibatches=1",
    "train_type.optimizer.lr=1e-3",
    "train_type.scheduler.min_lr_ratio=0.1",
    "logger.tensorboard=false",
]


def _resume_longer(run_dir: Path, mode: str, caplog: pytest.LogCaptureFixture) -> float:
    """Train 2 steps, resume to 4 under ``mode``; returns the lr step 3 logged."""
    Run(compose_config([*RUN, "trainer.total_steps=2"]), run_dir).fit()
    cfg = compose_config([*RUN, "trainer.total_steps=4", f"ckpt.resume_schedule={mode}"])
    with caplog.at_level(logging.WARNING, logger="astrai.training.trainer"):
        resumed = Run(cfg, run_dir)
    resumed.fit(until=3)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(row["policy/lr"] for row in rows if row["step"] == 3)


def test_rescale_says_so_and_spans_the_new_total(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert _resume_longer(tmp_path, "rescale", caplog) == pytest.approx(1e-3 * 0.2318019)
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        "trainer.total_steps 2 → 4 since the checkpoint: the learning-rate schedules are "
        "rescaled to 4 optimizer steps at step 2; lr × 0.1 → × 0.55 "
        "(ckpt.resume_schedule=keep keeps the old curve)"
    )


def test_keep_says_so_and_keeps_the_old_curve(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert _resume_longer(tmp_path, "keep", caplog) == pytest.approx(1e-3 * 0.1)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("trainer.total_steps 2 → 4 since the checkpoint: the learning-rate ")
    assert "keep the curve they were built for (2 optimizer steps" in line


def test_the_same_total_says_nothing_and_a_kept_curve_stays_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _resume_longer(tmp_path, "keep", caplog)
    caplog.clear()
    cfg = compose_config([*RUN, "trainer.total_steps=4"])  # rescale, but total_steps as saved
    with caplog.at_level(logging.WARNING, logger="astrai.training.trainer"):
        again = Run(cfg, tmp_path)
    assert caplog.records == [] and again.started.state.schedule_steps == 2
