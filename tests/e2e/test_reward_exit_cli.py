"""``python train.py`` with a reward that calls ``sys.exit()`` (issue 30, item 2): one line
naming the reward and the prompt, exit 2, the last checkpoint intact; the old code exited 0 with
no message."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from safetensors.torch import load_file
from tests.train_runs import TRAIN

# its instance built by the trainer exits at call EXIT_AT (the pre-run check's makes 1 call)
QUITTING_REWARD = textwrap.dedent(
    """
    import sys

    class QuitAt:
        def __init__(self, call):
            self.call = call

        def __call__(self, prompts, responses, answers):
            self.call -= 1
            if self.call == 0:
                sys.exit()
            return [0.0] * len(responses)
    """
)


@pytest.mark.slow  # ~6 s each: one train.py run
@pytest.mark.parametrize(
    ("call", "saved"),
    [(1, []), (4, ["step_1"])],
    ids=["step-0-evaluation", "step-2-rollout"],  # calls: eval 0, rollout 1, eval 1, rollout 2
)
def test_a_reward_calling_sys_exit_stops_the_run_with_one_line(
    tmp_path: Path, call: int, saved: list[str]
) -> None:
    (tmp_path / "quitting_reward.py").write_text(QUITTING_REWARD)
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            TRAIN,
            "debug=quick",
            "trainer.total_steps=3",
            "ckpt.every_steps=1",
            "reward=custom",
            "reward._target_=quitting_reward.QuitAt",
            f"+reward.call={call + 1}",  # + the pre-run check's call
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        env={
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("astrai:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors[0].startswith("astrai: reward error: reward quit_at called sys.exit() on prompt")
    steps = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))
    assert steps == saved
    for step in saved:  # complete and readable
        assert load_file(str(run_dir / "checkpoints" / step / "model.safetensors"))
