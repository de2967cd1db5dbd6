"""Stopping a multi-process run: the launcher forwards SIGTERM/SIGINT and exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tests.train_runs import (
    TRAIN,
    checkpoint_weights,
    last_logged_step,
    run_train,
    run_train_in_process,
)

from astrai.algorithms.ppo import PPOStrategy
from astrai.checkpoints.layout import missing_files, required_files
from astrai.training.stop_forwarder import StopForwarder

# --- the forwarder, with stand-in workers --------------------------------------------------

PYTHON_WORKER = (  # a stand-in worker: says ready, then sleeps (SIGTERM ignored if asked)
    "import signal, sys, time\n"
    "if sys.argv[1] == 'stubborn':\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def _worker(kind: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", PYTHON_WORKER, kind], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_the_first_signal_goes_to_the_workers_and_the_launcher_carries_on() -> None:
    worker = _worker("plain")
    previous = signal.getsignal(signal.SIGTERM)
    with StopForwarder(grace_s=60, children=lambda: [worker.pid]) as forwarder:
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the next line
        assert forwarder.signal_name == "SIGTERM"
        assert worker.wait(timeout=30) == -signal.SIGTERM  # the worker got it
    assert signal.getsignal(signal.SIGTERM) is previous
    assert forwarder.killed == []


def test_workers_still_running_after_the_grace_period_are_killed() -> None:
    worker = _worker("stubborn")
    with StopForwarder(grace_s=0.2, children=lambda: [worker.pid]) as forwarder:
        os.kill(os.getpid(), signal.SIGTERM)
        assert worker.wait(timeout=30) == -signal.SIGKILL
    assert forwarder.killed == [worker.pid]


@pytest.mark.parametrize("case", ["second signal", "no workers"])
def test_a_second_signal_or_one_without_workers_ends_the_launcher_at_once(case: str) -> None:
    """In a child process, whose worker list is empty for "no workers"."""
    script = (
        "import os, signal, sys\n"
        "from astrai.training.stop_forwarder import StopForwarder\n"
        "workers = [] if sys.argv[1] == 'no workers' else [os.getpid() + 10**7]  # none alive\n"
        "with StopForwarder(60, children=lambda: workers):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    print('first', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    print('survived', flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, case], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.splitlines() == ([] if case == "no workers" else ["first"])
    assert result.returncode == -signal.SIGTERM


# --- through python train.py with 2 CPU processes -------------------------------------------


def test_a_grace_period_that_is_no_duration_fails_before_the_launch(tmp_path: Path) -> None:
    args = ["infra.device=cpu", "infra.nproc_per_node=2", "infra.container.stop_grace_period=5x"]
    # train.py's main in this process: the config family's real process is train_type=nope's
    # row in tests/e2e/test_train_cli.py
    result = run_train_in_process(args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("astrai: config error: infra.container.stop_grace_period")
    assert len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written


TWO_PROCESSES = [
    "train_type=online_ppo",  # checkpoints with the critic's extras too
    "infra.device=cpu",
    "infra.nproc_per_node=2",
    "debug=quick",
    "trainer.total_steps=30",
    "trainer.eval_every=10",
    "ckpt.every_steps=0",
]


def _start(run_dir: Path, cwd: Path) -> subprocess.Popen:
    """``python train.py`` in a session of its own (as a shell starts a job), stdout piped."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.Popen(
        [sys.executable, TRAIN, *TWO_PROCESSES, f"hydra.run.dir={run_dir}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _stop_once_training(proc: subprocess.Popen, run_dir: Path, send: Callable[[], None]) -> str:
    """Wait for a logged step after step 0, call ``send()``, return the run's output."""
    deadline = time.monotonic() + 240
    while last_logged_step(run_dir) < 2 and time.monotonic() < deadline:
        if proc.poll() is not None:
            out, _ = proc.communicate()
            pytest.fail(f"the run ended before it could be stopped:\n{out[-3000:]}")
        time.sleep(0.05)
    send()
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
    return out


def _assert_stopped_with_a_checkpoint(run_dir: Path, name: str) -> int:
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped"] == name
    k = summary["step"]
    assert 2 <= k < 30
    checkpoint = run_dir / "checkpoints" / f"step_{k}"
    assert summary["checkpoint"] == str(checkpoint)
    assert missing_files(checkpoint, required_files(PPOStrategy.checkpoint_files)) == []
    assert json.loads((checkpoint / "trainer_state.json").read_text())["step"] == k
    return k


@pytest.mark.slow  # 1-2 min on 2 shared cores: three 2-process launches
def test_sigterm_stops_a_two_process_run_with_exit_0_and_it_resumes_exactly(
    tmp_path: Path,
) -> None:
    stopped = tmp_path / "stopped"
    proc = _start(stopped, tmp_path)
    out = _stop_once_training(proc, stopped, lambda: proc.send_signal(signal.SIGTERM))
    assert proc.returncode == 0, out[-3000:]  # was 1: torch elastic raised in the launcher
    k = _assert_stopped_with_a_checkpoint(stopped, "SIGTERM")
    assert f"stopped (SIGTERM): {k} steps" in out
    assert "did not stop within" not in out  # the workers stopped by themselves, not SIGKILL

    resumed = run_train([*TWO_PROCESSES, f"hydra.run.dir={stopped}"], tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((stopped / "summary.json").read_text())["step"] == 30
    steps = [json.loads(line)["step"] for line in (stopped / "metrics.jsonl").open()]
    assert steps == list(range(31))

    straight = tmp_path / "straight"
    result = run_train([*TWO_PROCESSES, f"hydra.run.dir={straight}"], tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    final = Path("checkpoints") / "step_30"
    a, b = (
        checkpoint_weights(straight / final / "model.safetensors"),
        checkpoint_weights(stopped / final / "model.safetensors"),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    a, b = (
        torch.load(d / final / "value_model.pt", weights_only=True) for d in (straight, stopped)
    )
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


@pytest.mark.slow  # 25-40 s: one 2-process launch
def test_ctrl_c_reaches_the_workers_once(tmp_path: Path) -> None:
    """A terminal's Ctrl-C signals the whole foreground process group: the workers must not
    count the launcher's forwarded SIGINT as a second one (which kills them at once)."""
    run_dir = tmp_path / "run"
    proc = _start(run_dir, tmp_path)  # the leader of its own process group
    out = _stop_once_training(proc, run_dir, lambda: os.killpg(proc.pid, signal.SIGINT))
    assert proc.returncode == 0, out[-3000:]
    _assert_stopped_with_a_checkpoint(run_dir, "SIGINT")
