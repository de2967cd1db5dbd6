"""A SIGTERM after the run's stop completed leaves the exit status 0 (issue 30, item 5), also
during the interpreter's exit, where Python had put the signal's default action back (143)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.train_runs import TRAIN

# the stop completes; then, during finalization (module teardown, after the atexit callbacks),
# an object's __del__ sends SIGTERM to its own process
AT_FINALIZATION = textwrap.dedent(
    """
    import os, signal, time
    from astrai.training.stopping import StopRequest, catch_stop_signals

    catch_stop_signals()
    with StopRequest():
        os.kill(os.getpid(), signal.SIGTERM)

    class Late:
        def __del__(self, kill=os.kill, pid=os.getpid(), write=os.write, sleep=time.sleep):
            kill(pid, signal.SIGTERM)
            sleep(0.05)
            write(1, b"survived\\n")

    late = Late()
    print("stopped", flush=True)
    """
)


def test_a_sigterm_during_the_interpreter_s_exit_is_ignored() -> None:
    result = subprocess.run(
        [sys.executable, "-c", AT_FINALIZATION], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["stopped", "survived"]


PAUSING_REWARD = textwrap.dedent(
    """
    import sys, time

    class PauseAt:
        def __init__(self, call):
            self.call = call

        def __call__(self, prompts, responses, answers):
            self.call -= 1
            if self.call == 0:
                print("MARK pausing", file=sys.stderr, flush=True)
                time.sleep(30)
            return [0.0] * len(responses)
    """
)


@pytest.mark.slow  # ~8 s: one train.py run
def test_sigterms_after_train_py_s_stop_completed_keep_exit_0(tmp_path: Path) -> None:
    """SIGTERM while sampling step 2; once the run logged its last line, SIGTERM every few
    milliseconds until the process is gone: exit 0 (the old code died by the signal)."""
    (tmp_path / "pausing_reward.py").write_text(PAUSING_REWARD)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            TRAIN,
            "debug=quick",
            "trainer.total_steps=3",
            "trainer.eval_every=100",
            "reward=custom",
            "reward._target_=pausing_reward.PauseAt",
            "+reward.call=3",  # the trainer's: step-0 evaluation, step 1's, step 2's rollout
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # Hydra logs to stdout, the reward's mark to stderr
        text=True,
    )
    assert proc.stdout is not None
    lines, sent = [], 0
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("MARK pausing"):
            proc.send_signal(signal.SIGTERM)
        if "stopped (SIGTERM): 1 steps in" in line:  # train.run's last line: the stop is done
            break
        assert time.monotonic() < deadline, "".join(lines)[-3000:]
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            proc.send_signal(signal.SIGTERM)
            sent += 1
        except ProcessLookupError:
            break
        time.sleep(0.005)
    rest = proc.stdout.read()
    code = proc.wait(timeout=60)
    assert code == 0, ("".join(lines) + rest)[-3000:]
    assert sent > 0
