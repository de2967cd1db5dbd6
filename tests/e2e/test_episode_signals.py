"""SIGTERM and ``kill -9`` while episodes are being played (issue 50's acceptance; issue 62's for
an OpenEnv server, whose sessions are in flight and which ends with the run): at lag 0 the
step's episodes are abandoned and played again on resume; at lag 1 the checkpoint holds the
episodes already sampled for the next step. Either way the resumed run ends bitwise where the
straight run ends, and every step trains the same task rows as the straight run's step: none
lost, none trained twice (counted from each step's logged rollout samples)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.train_runs import TRAIN

from astrai.checkpoints.completeness import latest_checkpoint

# two turns on any task row (rewards: the parity of a hash of the sampled text, so they vary
# within groups whatever a random model samples). Resets are counted in ASTRAI_TEST_RESETS: the
# first environment step once ASTRAI_TEST_PAUSE_AT episodes have been opened announces itself
# and stalls for 60 s. (Resets, not steps, are counted: how many steps an episode takes rests on
# what the random model samples — an episode past its token limit ends after one turn — and
# that differs between CPUs.)
ENV_MODULE = textwrap.dedent(
    """
    import hashlib, os, sys, time
    from pathlib import Path
    from astrai.envs import Environment, StepResult

    def parity(text):
        return float(hashlib.sha256(text.encode()).digest()[0] % 2)

    class Paused(Environment):
        def reset(self, row):
            with Path(os.environ["ASTRAI_TEST_RESETS"]).open("a") as f:
                f.write("x")
            self.turns = 0
            return [{"role": "user", "content": row["text"]}]

        def step(self, turn):
            resets = len(Path(os.environ["ASTRAI_TEST_RESETS"]).read_text())
            paused = Path(os.environ["ASTRAI_TEST_RESETS"] + ".paused")
            pause_at = os.environ.get("ASTRAI_TEST_PAUSE_AT")
            if pause_at and resets >= int(pause_at) and not paused.exists():
                paused.touch()
                print("MARK pausing", file=sys.stderr, flush=True)
                time.sleep(60)
            self.turns += 1
            if self.turns == 1:
                return StepResult([{"role": "tool", "content": "=1"}], 0.25 * parity(turn.content))
            return StepResult(reward=parity(turn.content), done=True)
    """
)
# the same environment as an OpenEnv server (env=openenv, issue 62): astrai serves it in a
# process of its own, which must end with the run, kill -9 included
SERVER_MODULE = textwrap.dedent(
    """
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State
    from astrai.envs.tool_calls import ParsedTurn
    import paused_env

    class Say(Action):
        message: str

    class Heard(Observation):
        text: str

    class Paused(Environment[Say, Heard, State]):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self.env, self._state = paused_env.Paused(), State()

        def reset(self, seed=None, episode_id=None, **row):
            return Heard(text=self.env.reset(row)[0]["content"])

        def step(self, action, timeout_s=None, **kwargs):
            result = self.env.step(ParsedTurn(content=action.message))
            text = result.observations[0]["content"] if result.observations else ""
            return Heard(text=text, reward=result.reward, done=result.done)

        @property
        def state(self):
            return self._state

    app = create_fastapi_app(Paused, Say, Heard, max_concurrent_envs=256)
    """
)
ARGS = [
    "debug=quick",
    "trainer.total_steps=4",
    "trainer.eval_every=100",
    "trainer.eval_prompts=2",
    "logger.samples_every=1",
    "ckpt.every_steps=1",
    "env.parser=none",
    "env.step_timeout_s=120",
]
ENVS = {
    "native": ["env=custom", "env._target_=paused_env.Paused"],
    "openenv": ["env=openenv", "env.app=paused_server:app", "env.reset_args=[text]",
                "env.observation_role=tool"],
}  # fmt: skip
# 8 episodes a step (4 prompts x 2); the configuration check opens 2 task rows twice each (a
# nondeterministic opening is refused there) and the step-0 evaluation 2 episodes, so the
# 4 + 2 + 8 + 8 + 1-th reset opens step 3's rollout, all of whose
# resets precede its first environment step. At lag 0 the stop comes while step 3's rollout is
# played (checkpoint 2 complete); at lag 1 while step 4's is played on the sampling thread and
# step 3 updates (checkpoint 2, which holds step 3's rollout, complete; checkpoint 3 waits for
# step 4's rollout)
PAUSE_AT = {0: 4 + 2 + 8 + 8 + 1, 1: 4 + 2 + 8 + 8 + 8 + 1}
NOISY = ("time/", "perf/", "env/step_s")


def _env(tmp_path: Path, pause_at: int | None, name: str) -> dict[str, str]:
    (tmp_path / "paused_env.py").write_text(ENV_MODULE)
    (tmp_path / "paused_server.py").write_text(SERVER_MODULE)
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "ASTRAI_TEST_PAUSE_AT": str(pause_at or ""),
        "ASTRAI_TEST_RESETS": str(tmp_path / f"resets.{name}"),
    }


def _run(tmp_path: Path, run_dir: Path, args: list[str], name: str) -> None:
    result = subprocess.run(
        [sys.executable, TRAIN, *ARGS, *args, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env=_env(tmp_path, None, name), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def _stop_at_mark(
    tmp_path: Path, run_dir: Path, args: list[str], sig: int, pause_at: int
) -> tuple[int, str, list[int]]:
    """The stopped run's exit code, its output, and the processes of its environment (its
    OpenEnv server's) when the signal was sent."""
    proc = subprocess.Popen(
        [sys.executable, TRAIN, *ARGS, *args, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env=_env(tmp_path, pause_at, f"stopped-{sig}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 180
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("MARK pausing"):
            # step 2's checkpoint (written in the background) complete first: what the stop
            # resumes from
            while (found := latest_checkpoint(run_dir)) is None or found.step != 2:
                assert time.monotonic() < deadline, "step 2's checkpoint never completed"
                time.sleep(0.05)
            serving = _servers_of(tmp_path, f"stopped-{sig}")
            proc.send_signal(sig)
            break
        assert time.monotonic() < deadline
    else:
        proc.wait(timeout=60)
        pytest.fail(f"the run ended ({proc.returncode}) without pausing:\n{''.join(seen)[-3000:]}")
    rest, err = proc.communicate(timeout=120)
    return proc.returncode, "".join(seen) + err + rest, serving


def _trained_rows(run_dir: Path) -> dict[int, list[str]]:
    """Each step's task rows, read from its logged rollout samples (one per prompt)."""
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"tensors": 0})
    events.Reload()
    rows = {}
    for event in events.Tensors("samples/rollout/text_summary"):
        table = event.tensor_proto.string_val[0].decode()
        rows[event.step] = [line.split("`")[1] for line in table.splitlines()[2:]]
    return rows


def _metrics(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in json.loads(line).items() if not k.startswith(NOISY)} for line in lines
    ]


def _servers_of(tmp_path: Path, name: str) -> list[int]:
    """The OpenEnv servers (``astrai.envs.openenv_serve``) whose environment names the run
    ``name``'s reset count."""
    marker = f"ASTRAI_TEST_RESETS={tmp_path / f'resets.{name}'}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit():
                continue
            serves = b"astrai.envs.openenv_serve" in (proc / "cmdline").read_bytes()
            if serves and marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


@pytest.mark.slow  # ~13 s each: three train.py runs
@pytest.mark.parametrize(
    ("sig", "lag", "env"),
    [(signal.SIGTERM, 0, "native"), (signal.SIGKILL, 0, "native"), (signal.SIGTERM, 1, "native"),
     (signal.SIGKILL, 1, "native"), (signal.SIGTERM, 0, "openenv"),
     (signal.SIGKILL, 0, "openenv")],
    ids=["sigterm-lag0", "kill9-lag0", "sigterm-lag1", "kill9-lag1", "openenv-sigterm-lag0",
         "openenv-kill9-lag0"],
)  # fmt: skip
def test_a_stop_with_episodes_in_flight_resumes_bitwise_with_every_task_once(
    tmp_path: Path, sig: int, lag: int, env: str
) -> None:
    args = [f"train_type.max_policy_lag={lag}", *ENVS[env]]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    _run(tmp_path, straight, args, "straight")
    code, err, serving = _stop_at_mark(tmp_path, stopped, args, sig, PAUSE_AT[lag])
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
        last = 2  # what had completed: step 3's rollout (lag 0) or step 3's update was running
    elif lag == 0:  # the stop abandons step 3's rollout
        assert code == 0, err[-3000:]
        assert "stopped (SIGTERM) while sampling step 3" in err, err[-3000:]
        last = 2
    else:  # step 3's update finishes; its checkpoint abandons step 4's rollout, re-issued
        assert code == 0, err[-3000:]
        assert "the rollout of step 4, not finished, is abandoned" in err, err[-3000:]
        assert "stopped (SIGTERM) at step 3" in err, err[-3000:]
        # the sampling thread's wait on the hung step ends (``abandon_steps_of``)
        assert "left behind" not in err, err[-3000:]
        last = 3
    if env == "openenv":  # its server, serving at the stop, ended with the run, kill -9 included
        assert len(serving) == 1, serving
        deadline = time.monotonic() + 10
        while _servers_of(tmp_path, f"stopped-{sig}"):
            assert time.monotonic() < deadline, "the OpenEnv server outlived its run"
            time.sleep(0.1)
    done = sorted(int(p.name.split("_")[1]) for p in (stopped / "checkpoints").glob("step_*"))
    assert done and done[-1] == last, done
    _run(tmp_path, stopped, args, "resumed")
    a = load_file(str(straight / "checkpoints" / "step_4" / "model.safetensors"))
    b = load_file(str(stopped / "checkpoints" / "step_4" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _metrics(straight) == _metrics(stopped)
    trained, again = _trained_rows(straight), _trained_rows(stopped)
    assert sorted(trained) == sorted(again) == [1, 2, 3, 4]
    assert trained == again  # every step trained the straight run's task rows
    counts = Counter(row for rows in again.values() for row in rows)
    assert counts == Counter(row for rows in trained.values() for row in rows)
    assert sum(counts.values()) == 4 * 4  # 4 prompts a step, each once
