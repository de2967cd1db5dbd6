"""The acceptance runs: the embedded default (GRPO on addition) and PPO learn on a CPU.

Slow (a few minutes on 2 cores): ``make test-slow``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.train_runs import run_train


@pytest.mark.slow
def test_default_job_learns_addition(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_train(
        [f"hydra.run.dir={run_dir}", "trainer.progress_bar=false"],
        cwd=tmp_path,
        timeout=1800,  # ~3 min alone; generous for a loaded CI machine
        # one thread: as fast as two at this size (docs/benchmarks.md), and the slow suite runs
        # on 2 workers: two threads each would contend for the 2 cores, several times slower
        threads=1,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["eval/accuracy"]) for r in records if "eval/accuracy" in r]
    assert evals[0][0] == 0 and evals[0][1] <= 0.2
    final_step, final_accuracy = evals[-1]
    assert final_accuracy >= 0.9, evals
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval/accuracy"] == final_accuracy and summary["step"] == final_step
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    tb = {e.step: e.value for e in events.Scalars("eval/accuracy")}
    assert tb[0] == pytest.approx(evals[0][1]) and tb[final_step] == pytest.approx(final_accuracy)
    assert f"eval/accuracy {final_accuracy:.3f}" in result.stdout  # the final console line


@pytest.mark.slow
def test_ppo_learns_addition_with_a_critic_that_learns(tmp_path: Path) -> None:
    """`python train.py train_type=online_ppo` (the PPO acceptance run, ~4 min on 2 cores)."""
    run_dir = tmp_path / "run"
    result = run_train(
        ["train_type=online_ppo", f"hydra.run.dir={run_dir}", "trainer.progress_bar=false"],
        cwd=tmp_path,
        timeout=2400,
        threads=1,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["eval/accuracy"]) for r in records if "eval/accuracy" in r]
    assert evals[0][0] == 0 and evals[0][1] <= 0.2
    assert evals[-1][0] == 1200 and evals[-1][1] >= 0.9, evals
    explained = [r["value/explained_variance"] for r in records if "value/explained_variance" in r]
    assert len(explained) == 1200  # logged every step
    assert max(v for v in explained if v is not None) > 0.5  # the critic learns
