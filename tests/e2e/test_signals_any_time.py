"""A stop signal at any time (issue 21, item 5): during start-up, during the step-0 evaluation
and while sampling a step, ``python train.py`` exits 0 with one line saying what it saved; a
signal after a completed stop changes nothing."""

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
from tests.train_runs import TRAIN

# a reward that announces itself on stderr and then takes its time, where ASTRAI_TEST_PAUSE says;
# its values alternate within every group (tests/constructed_rewards.py's alternating_reward).
# Built in this process twice (the config's validation, then the Trainer) and again in each
# reward worker (``astrai.rewards.worker``), where it is called: the trainer's calls (8
# responses; the pre-run check scores 4) are counted in the file ASTRAI_TEST_CALLS names.
REWARD_MODULE = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    from pathlib import Path

    PAUSE = os.environ.get("ASTRAI_TEST_PAUSE", "")

    def pause(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.05)

    class Paused:
        built = 0

        def __init__(self):
            if multiprocessing.parent_process() is None:  # not in a reward worker
                Paused.built += 1
                if PAUSE == f"build{Paused.built}":
                    print("MARK pausing", file=sys.stderr, flush=True)
                    pause(3)

        def __call__(self, prompts, responses, answers):
            if len(responses) == 8:  # the trainer's (the pre-run check scores 4)
                counter = Path(os.environ["ASTRAI_TEST_CALLS"])
                with counter.open("a") as f:
                    f.write("x")
                calls = len(counter.read_text())
                # call 1: the step-0 evaluation; call 3: step 2's rollout (no evaluation between)
                if (PAUSE, calls) in (("eval", 1), ("rollout", 3)):
                    print("MARK pausing", file=sys.stderr, flush=True)
                    pause(20)
            # 1, 0, 1, 0, ...: every group's rewards vary, so every step trains whatever the
            # random model samples (its answers may all be wrong: nothing to resume exactly)
            return [float(i % 2 == 0) for i in range(len(responses))]
    """
)
ARGS = [
    "debug=quick",
    "trainer.total_steps=3",
    "trainer.eval_every=100",
    "reward=custom",
    "reward._target_=paused_reward.Paused",
]


def _env(tmp_path: Path, pause: str, calls: str = "calls") -> dict[str, str]:
    (tmp_path / "paused_reward.py").write_text(REWARD_MODULE)
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "ASTRAI_TEST_PAUSE": pause,
        "ASTRAI_TEST_CALLS": str(tmp_path / f"{calls}.{pause or 'none'}"),
    }


def _rows(run_dir: Path) -> list[dict]:
    """The rows of ``run_dir``'s metrics.jsonl (none when it is missing)."""
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.open()] if path.is_file() else []


def _signal_at_mark(tmp_path: Path, run_dir: Path, pause: str) -> tuple[int, str]:
    """Run train.py, SIGTERM it when the reward says it pauses; (exit code, its output)."""
    proc = subprocess.Popen(
        [sys.executable, TRAIN, *ARGS, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env=_env(tmp_path, pause),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines = []
    deadline = time.monotonic() + 120
    for line in proc.stderr:  # the reward's mark comes before any other output it waits on
        lines.append(line)
        if line.startswith("MARK pausing"):
            proc.send_signal(signal.SIGTERM)
            break
        assert time.monotonic() < deadline
    rest, err = proc.communicate(timeout=120)
    return proc.returncode, "".join(lines) + err + rest  # Hydra logs to stdout


@pytest.mark.slow  # ~6 s each: one train.py run
@pytest.mark.parametrize("pause", ["build1", "build2"], ids=["validation", "trainer-construction"])
def test_sigterm_during_start_up_stops_it_at_once_and_exits_0(tmp_path: Path, pause: str) -> None:
    """Start-up is interruptible (issue 45): the 3 s pause is cut short, no step is taken,
    ``.hydra/`` and ``train.log`` stay and say why."""
    run_dir = tmp_path / "run"
    code, err = _signal_at_mark(tmp_path, run_dir, pause)
    assert code == 0, err[-3000:]
    assert "SIGTERM received during start-up: stopping now (no step taken)" in err
    line = "stopped (SIGTERM) during start-up: no step taken, nothing to save"
    assert line in err and line in (run_dir / "train.log").read_text()
    assert "Traceback" not in err
    assert not (run_dir / "checkpoints").exists()
    assert _rows(run_dir) == []  # not even the step-0 evaluation ran
    assert (run_dir / ".hydra" / "config.yaml").is_file()


@pytest.mark.slow  # ~6 s: one train.py run
def test_sigterm_during_the_step_0_evaluation_abandons_it_and_exits_0(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, err = _signal_at_mark(tmp_path, run_dir, "eval")
    assert code == 0, err[-3000:]
    assert "stopped (SIGTERM) before step 1: nothing new to save" in err
    assert not (run_dir / "checkpoints").exists()
    # abandoned at once: the 20 s reward call never returned, so no step-0 row was logged
    assert _rows(run_dir) == []
    assert "Traceback" not in err


@pytest.mark.slow  # ~20 s: three train.py runs
def test_sigterm_while_sampling_abandons_the_step_and_resumes_exactly(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    result = subprocess.run(
        [sys.executable, TRAIN, *ARGS, f"hydra.run.dir={straight}"],
        cwd=tmp_path, env=_env(tmp_path, ""), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]

    stopped = tmp_path / "stopped"
    code, err = _signal_at_mark(tmp_path, stopped, "rollout")
    assert code == 0, err[-3000:]
    step_1 = stopped / "checkpoints" / "step_1"
    assert f"stopped (SIGTERM) while sampling step 2: {step_1}" in err
    assert sorted(p.name for p in (stopped / "checkpoints").glob("step_*")) == ["step_1"]

    resumed = subprocess.run(
        [sys.executable, TRAIN, *ARGS, f"hydra.run.dir={stopped}"],
        cwd=tmp_path, env=_env(tmp_path, ""), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = load_file(str(straight / "checkpoints" / "step_3" / "model.safetensors"))
    b = load_file(str(stopped / "checkpoints" / "step_3" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    steps = [json.loads(line)["step"] for line in (stopped / "metrics.jsonl").open()]
    assert steps == [0, 1, 2, 3]
    # every logged value but the wall-clock ones, and the steps trained on varied rewards
    rows = [
        [{k: v for k, v in row.items() if not k.startswith(("time/", "perf/"))} for row in _rows(d)]
        for d in (straight, stopped)
    ]
    assert rows[0] == rows[1]
    assert all(row["advantages/std"] > 0 for row in rows[0][1:])


def _as_train_py(body: str) -> subprocess.CompletedProcess:
    """Run ``body`` in a child process that catches stop signals as ``python train.py`` does."""
    script = (
        "import os, signal\n"
        "from astrai.training.stopping import StopRequest, catch_stop_signals\n"
        "catch_stop_signals()\n" + textwrap.dedent(body)
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )


def test_a_signal_after_a_completed_stop_is_ignored() -> None:
    """The run's stop completes, and a second SIGTERM then (during shut-down) neither kills nor
    changes the exit status."""
    result = _as_train_py(
        """
        with StopRequest() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            print(stop.reason, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        print('survived', flush=True)
        """
    )
    assert result.stdout.splitlines() == ["SIGTERM", "survived"]
    assert result.returncode == 0
    assert "SIGTERM received after the run stopped: ignored" in result.stderr


def test_a_signal_before_the_loop_is_the_reason_when_it_starts() -> None:
    """Between start-up and the loop (``end_start_up``), or inside a write start-up holds shut
    (``deferred_stop``), a signal waits: the loop starts with it as its reason."""
    result = _as_train_py(
        """
        from astrai.training.stopping import end_start_up
        end_start_up()
        os.kill(os.getpid(), signal.SIGTERM)
        with StopRequest() as stop:
            print(stop.reason, flush=True)
        """
    )
    assert result.stdout.splitlines() == ["SIGTERM"], result.stderr
    assert result.returncode == 0


def test_a_signal_during_start_up_raises_at_once_or_after_a_deferred_write() -> None:
    result = _as_train_py(
        """
        import time
        from astrai.training.stopping import StopInterrupt, deferred_stop
        try:
            with deferred_stop():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
                print("write finished", flush=True)
        except StopInterrupt as stop:
            print("raised after it:", stop.signal_name, flush=True)
        """
    )
    assert result.stdout.splitlines() == ["write finished", "raised after it: SIGTERM"]
    result = _as_train_py(
        """
        import time
        from astrai.training.stopping import StopInterrupt
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            print("not interrupted", flush=True)
        except StopInterrupt as stop:
            print("raised:", stop.signal_name, flush=True)
        """
    )
    assert result.stdout.splitlines() == ["raised: SIGTERM"], result.stderr
    assert "SIGTERM received during start-up: stopping now" in result.stderr
