"""``kill -9`` of a ``distill=opd`` run mid-step (issue 61's acceptance: "exact resume (kill -9
mid-run) equals the straight run bitwise"): the run resumed from its last complete checkpoint
ends with the straight run's weights, optimizer moments and metrics, ``distill/*`` included,
bit for bit; at lag 0 and at lag 1 (the checkpoint then holds the next step's rollout, sampled
before the teacher scores it).

A debug run's step takes tens of milliseconds, too short to kill at a chosen point by polling:
the task reward (``use_task_reward=false``: it only feeds the ``rollout/*`` metrics) stalls at
its first call after ``step_4``'s checkpoint is complete (renamed into place), and the test
kills the process there, mid-rollout of step 5 or 6."""

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
import torch
from safetensors.torch import load_file
from tests.distill_teacher import write_teacher
from tests.train_runs import TRAIN

from astrai.checkpoints import io
from astrai.checkpoints.completeness import latest_checkpoint

# a task reward (0 for every response, in the trainer's own thread) that, where
# ASTRAI_TEST_STALL_AFTER names a directory that exists, announces itself and stalls for 60 s
# at its first call after (once)
REWARD_MODULE = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path

    def stalling_reward(prompts, responses, answers):
        after = os.environ.get("ASTRAI_TEST_STALL_AFTER")
        if after and Path(after).is_dir():
            marker = Path(after + ".stalled")
            if not marker.exists():
                marker.touch()
                print("MARK stalling", file=sys.stderr, flush=True)
                time.sleep(60)
        return [0.0] * len(responses)

    stalling_reward.inline = True  # in the calling thread: no reward worker process
    """
)
ARGS = [
    "debug=quick",
    "distill=opd",
    "distill.estimator=k1",
    "distill.use_task_reward=false",  # the teacher's signal alone
    "trainer.total_steps=8",
    "trainer.eval_every=4",
    "ckpt.every_steps=2",
    "ckpt.keep_last=8",
    "reward=custom",
    "reward._target_=stalling_reward_module.stalling_reward",
]
STALL_AFTER = 4  # the complete checkpoint the kill comes after
NOISY = ("time/", "perf/")  # wall-clock measurements differ between any two runs


def _start(tmp_path: Path, run_dir: Path, args: list[str], stall: bool) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env.pop("ASTRAI_TEST_STALL_AFTER", None)
    if stall:
        env["ASTRAI_TEST_STALL_AFTER"] = str(run_dir / "checkpoints" / f"step_{STALL_AFTER}")
    return subprocess.Popen(
        [sys.executable, TRAIN, *ARGS, *args, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen) -> None:
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-3000:]


def _kill_at_stall(process: subprocess.Popen) -> None:
    """SIGKILL ``process`` once its reward stalls (after ``step_4`` is complete)."""
    assert process.stderr is not None
    deadline, seen = time.monotonic() + 120, []
    try:
        for line in process.stderr:
            seen.append(line)
            if line.startswith("MARK stalling"):
                process.send_signal(signal.SIGKILL)
                break
            assert time.monotonic() < deadline, "the reward never stalled"
        else:
            pytest.fail(f"the run ended without stalling:\n{''.join(seen)[-3000:]}")
        assert process.wait(timeout=30) == -signal.SIGKILL  # killed mid-run, not finished
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith(NOISY)} for row in rows]


@pytest.mark.slow  # ~12 s each: two train.py runs side by side, then the resume
@pytest.mark.parametrize("lag", [0, 1])
def test_a_killed_distillation_run_resumes_bitwise(tmp_path: Path, lag: int) -> None:
    (tmp_path / "stalling_reward_module.py").write_text(REWARD_MODULE)
    teacher = write_teacher(["debug=quick"], tmp_path)
    args = [f"teacher.path={teacher}", f"train_type.max_policy_lag={lag}"]
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    runs = [_start(tmp_path, straight, args, False), _start(tmp_path, killed, args, True)]
    try:
        _kill_at_stall(runs[1])
        _finish(runs[0])
    finally:
        for process in runs:
            if process.poll() is None:
                process.kill()
                process.wait()
    latest = latest_checkpoint(killed)
    assert latest is not None and latest.step == STALL_AFTER
    assert not (killed / "checkpoints" / "step_8").exists()
    at_kill = load_file(str(latest.path / "model.safetensors"))

    resumed = _start(tmp_path, killed, args, False)
    _finish(resumed)
    log = (killed / "train.log").read_text()
    assert f"resumed from {latest.path} at step {STALL_AFTER}" in log
    final, expected = (run / "checkpoints" / "step_8" for run in (killed, straight))
    assert (final / "model.safetensors").read_bytes() == (
        expected / "model.safetensors"
    ).read_bytes()
    a, b = io.load_torch(final / "optimizer.pt"), io.load_torch(expected / "optimizer.pt")
    moments = [(a["state"][i][k], b["state"][i][k]) for i in a["state"] for k in a["state"][i]]
    assert moments and all(torch.equal(x, y) for x, y in moments)
    rows = _rows(killed)
    assert rows == _rows(straight)
    assert [row["step"] for row in rows] == list(range(9))
    # the teacher's signal trained every step (a teacher far from the student), and it moved
    # the weights after the kill: the equality above is not of untouched weights
    assert all(row["distill/reverse_kl"] > 0.5 for row in rows[1:]), rows
    last = load_file(str(final / "model.safetensors"))
    assert any(not torch.equal(at_kill[k], last[k]) for k in at_kill)
