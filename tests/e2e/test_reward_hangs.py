"""Rewards that do not return cost their answers, not the run (issue 45, item 1): real
``python train.py`` runs whose reward hangs in C code holding the GIL, at lag 0 (the main
thread scores) and lag 1 (the sampling thread scores), finish with exit 0 and a summary; the
answers score as documented (``reward.timeout_score``, or math-verify's own 0.0) and the
timeouts are counted in ``rollout/reward_timeouts``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.train_runs import LAG_1, QUICK, REPO, run_train

HELPERS = "tests.rewards.hanging_rewards"
# one step of debug=quick's 4 prompts x 2 (at lag 1 the sampling thread samples it too); 4
# evaluation prompts (the helpers spoil 8-row batches: the training rollouts only)
SHORT = [*QUICK, "trainer.total_steps=1", "trainer.eval_prompts=4", "reward=custom"]
LAGS = {"lag0": [], "lag1": LAG_1}


def _train(tmp_path: Path, args: list[str]) -> tuple[subprocess.CompletedProcess, list[dict]]:
    run_dir = tmp_path / "run"
    result = run_train(
        [*SHORT, *args, f"hydra.run.dir={run_dir}"],
        tmp_path,
        timeout=240,
        extra_env={"PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (run_dir / "summary.json").is_file()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return result, [row for row in rows if "rollout/reward_timeouts" in row]


@pytest.mark.slow  # ~25-35 s each: one train.py run with a reward that runs for seconds
@pytest.mark.parametrize("lag", list(LAGS))
@pytest.mark.parametrize("timeout_s", ["null", "2"])
def test_math_on_a_pathological_answer_costs_that_answer(
    tmp_path: Path, lag: str, timeout_s: str
) -> None:
    """``$9^{9^{9^{9}}}$`` forced as a training rollout's first answer: in the worker's main
    thread math-verify's own alarm bounds it (scored 0.0, no timeout counted); with
    ``reward.timeout_s`` shorter than that alarm, the worker is killed, the row scores
    ``reward.timeout_score`` and is counted, once per step."""
    start = time.monotonic()
    result, steps = _train(
        tmp_path,
        [
            f"reward._target_={HELPERS}.math_with_a_pathological_answer",
            f"reward.timeout_s={timeout_s}",
            *LAGS[lag],
        ],
    )
    assert [row["step"] for row in steps] == [1]
    counted = [row["rollout/reward_timeouts"] for row in steps]
    if timeout_s == "null":
        assert counted == [0.0]
    else:
        assert counted == [1.0]
        assert "did not return on prompt" in result.stderr + result.stdout
    print(f"{lag} timeout_s={timeout_s}: {time.monotonic() - start:.1f} s")


@pytest.mark.slow  # ~30 s: one train.py run
def test_a_backtracking_regex_at_lag_1_is_counted_and_the_run_finishes(tmp_path: Path) -> None:
    start = time.monotonic()
    _, steps = _train(
        tmp_path,
        [f"reward._target_={HELPERS}.backtracking_on_a_training_row", "reward.timeout_s=3", *LAG_1],
    )
    assert [row["step"] for row in steps] == [1]
    assert all(row["rollout/reward_timeouts"] >= 1 for row in steps)
    print(f"backtracking lag1: {time.monotonic() - start:.1f} s")


ORPHAN = textwrap.dedent(
    """
    from astrai.rewards.build import build_reward

    terms = [
        {"_target_": f"tests.rewards.hanging_rewards.{name}", "weight": 1.0}
        for name in ("worker_pid", "sleeps_on_hang")
    ]
    reward = build_reward({"accuracy_threshold": 1.0, "terms": terms})
    print(int(reward.score(["p"], ["r"], [None])[1]["worker_pid"][0]), flush=True)
    reward.score(["p"], ["hang"], [None])  # the worker sleeps in the call: it reads no pipe
    """
)


@pytest.mark.slow  # ~2 s: one small process
def test_a_worker_dies_with_a_parent_killed_by_sigkill(tmp_path: Path) -> None:
    """Even one busy in a call (it reads no pipe): it dies with its forkserver, which exits
    with the parent (``PR_SET_PDEATHSIG``)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    os.kill(pid, 0)  # alive
    time.sleep(1.0)  # the parent has sent the hanging call: the worker sleeps in it
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"reward worker {pid} outlived its parent")
