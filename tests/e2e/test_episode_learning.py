"""PPO learns the embedded tool task through its episodes (issue 64): ``python train.py
experiment=calculator_ppo`` from a random tiny model to held-out greedy accuracy 0.9.

The bar rests on a measured distribution, not on one machine's rounding: with the preset, seeds
0-4 reached 0.9 at steps 150-300 (docs/environments.md: one thread with another run beside it,
and two threads on a quiet machine), and the test's seed at step 150 both ways. The run may take
``MAX_STEPS`` (2.7× that, 1.3× the slowest seed's) before it fails. Without the preset's KL
anchor the same seed stayed at 0.36 from step 250 to 650: the collapse shows by step 100 as
groups that all score alike, which the test bounds too. Slow: ``make test-slow``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.train_runs import run_train

TARGET = 0.9
SEED = 2
MAX_STEPS = 400
# groups whose samples all scored alike, mean of steps 91-110: 0.11-0.16 with the KL anchor on
# seeds 0-4; without it the policy's entropy was 0.2-0.5 by step 100 and 85-92% of the groups
# scored alike by step ~300 in the runs that stalled
ALIKE_BOUND = 0.5


@pytest.mark.slow
def test_ppo_s_calculator_preset_learns_the_tool_task(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_train(
        [
            "experiment=calculator_ppo",
            f"seed={SEED}",
            f"trainer.total_steps={MAX_STEPS}",
            f"trainer.stop_at={{eval/accuracy:{TARGET}}}",
            f"hydra.run.dir={run_dir}",
            "trainer.progress_bar=false",
        ],
        cwd=tmp_path,
        timeout=2400,  # ~3 min on one thread with another run beside it
        threads=1,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
    assert evals[0] == (0, 0.0), evals  # a random model: no product right
    assert evals[-1][1] >= TARGET, evals
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped"] == "stop_at", summary
    near_100 = [r["rollout/frac_reward_zero_std"] for r in rows if 91 <= r.get("step", 0) <= 110]
    assert len(near_100) == 20 and sum(near_100) / 20 < ALIKE_BOUND, near_100
    # the critic fits the turn-level returns it is trained on
    explained = [r["value/explained_variance"] for r in rows if "value/explained_variance" in r]
    assert max(v for v in explained if v is not None) > 0.3, explained[-10:]
