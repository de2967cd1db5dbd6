"""``engine=vllm`` with ``max_policy_lag=1`` in real processes (issue 45): a run killed with
SIGKILL after its step-1 checkpoint, resumed twice from that checkpoint, each time in a fresh
process, ends with the straight run's weights, bit for bit.

Why processes: the first request of a process that asks for logprobs makes vLLM compile a
helper with ``torch.compile`` (~8 s here), and while it compiles ``torch.compiler.is_compiling()``
is True on every thread, which changes the bits of torch's AdamW step on the training thread. A
resumed process's first sample runs beside its first update, a straight run's does not; the
engine now does that first request at start (``vllm_start.warm_up``). In one process
(``test_vllm_training``'s resume rows) the compile has long happened, so only fresh processes
show it: before the warm-up these two resumes differed from the straight run and from each
other from step 2 on (|Δ| up to 1.2e-7)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tests.constructed_rewards import ALTERNATING
from tests.train_runs import REPO, TRAIN, checkpoint_weights

pytestmark = pytest.mark.vllm

# tests/engine/test_vllm_training.py's run, checkpointed every step (step 1's is resumed)
RUN = [
    "debug=quick",
    "engine=vllm",
    "model.num_attention_heads=2",
    "model.num_key_value_heads=1",
    "train_type.max_policy_lag=1",
    "trainer.total_steps=3",
    "trainer.eval_every=3",
    "logger.tensorboard=false",
    "ckpt.every_steps=1",
    "ckpt.keep_last=5",
    *ALTERNATING,
]
# one intra-op thread (the shared CI machine's); the constructed reward importable
ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "HYDRA_FULL_ERROR")},
    "OMP_NUM_THREADS": "1",
    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
}
TIMEOUT = 240  # s per process: ~10 s of engine start and compile, 3 tiny steps


def _start(run_dir: Path) -> subprocess.Popen:
    """``python train.py`` into ``run_dir`` in a process of its own (output: ``<run_dir>.log``)."""
    with run_dir.with_suffix(".log").open("w") as out:
        return subprocess.Popen(
            [sys.executable, TRAIN, *RUN, f"hydra.run.dir={run_dir}"],
            cwd=REPO,
            env=ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _finish(process: subprocess.Popen, run_dir: Path) -> str:
    """Wait for a run to end (exit 0); its output (stdout and stderr)."""
    try:
        code = process.wait(timeout=TIMEOUT)
    finally:
        process.kill()  # nothing once it has ended
    output = run_dir.with_suffix(".log").read_text()
    assert code == 0, output[-3000:]
    return output


def _kill_after_checkpoint(process: subprocess.Popen, run_dir: Path, step: int) -> None:
    """SIGKILL the run once ``step``'s checkpoint is complete (a checkpoint's directory appears
    whole: it is renamed into place)."""
    target = run_dir / "checkpoints" / f"step_{step}"
    deadline = time.monotonic() + TIMEOUT
    try:
        while not target.is_dir() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert target.is_dir(), f"no {target} before the run ended or timed out"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


def _only_checkpoint(run_dir: Path, step: int) -> None:
    """Remove every checkpoint (complete, temporary, set aside) but ``step``'s, so
    ``ckpt.resume=auto`` takes it whenever the kill landed."""
    for path in (run_dir / "checkpoints").iterdir():
        if "step_" in path.name and path.name != f"step_{step}":
            shutil.rmtree(path)


def test_two_resumes_of_a_killed_run_equal_the_straight_one(tmp_path: Path) -> None:
    # two processes at a time (one intra-op thread each): the straight run beside the killed
    # one, then the two resumes side by side; each process's bits are its own
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    runs = {straight: _start(straight), killed: _start(killed)}
    try:
        _kill_after_checkpoint(runs[killed], killed, 1)
        _finish(runs[straight], straight)
        resumes = [tmp_path / "resume_a", tmp_path / "resume_b"]
        for resumed in resumes:
            shutil.copytree(killed, resumed)
            _only_checkpoint(resumed, 1)
        runs |= {resumed: _start(resumed) for resumed in resumes}
        outputs = {resumed: _finish(runs[resumed], resumed) for resumed in resumes}
    finally:
        for process in runs.values():
            process.kill()
    expected = checkpoint_weights(straight / "checkpoints" / "step_3" / "model.safetensors")
    for resumed, output in outputs.items():
        assert "at step 1" in output  # "resumed from .../step_1 at step 1"
        # a compile while sampling would be the race this test is about, unannounced
        assert "torch.compile while sampling" not in output
        got = checkpoint_weights(resumed / "checkpoints" / "step_3" / "model.safetensors")
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            assert torch.equal(got[key], value), (resumed.name, key)
