"""SIGTERM and ``trainer.max_duration`` end a run within the stated bound at every phase
(issue 45, part 2; ``astrai.training.stopping``): a reward that hangs on the sampling thread
(lag 1) while a checkpoint or the training thread waits for its rollout, and a pre-run reward
check that hangs during start-up. Each run exits 0 with what was complete saved; the abandoned
rollout is re-issued on resume exactly as the straight run sampled it."""

from __future__ import annotations

import fcntl
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
from tests.train_runs import LAG_1, TRAIN

# the n-th rollout call (ASTRAI_TEST_HANG_AT, 1-based; 0: none) hangs, in whatever process the
# reward runs (a reward worker): the calls are counted in a file. A rollout's call holds each
# prompt G = 2 times side by side; an evaluation's and the pre-run check's do not.
# ASTRAI_TEST_HANG_CHECK=1: the pre-run check (4 responses: 2 probes, twice) hangs instead.
REWARD_MODULE = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path

    def _hang():
        print("MARK hanging", file=sys.stderr, flush=True)
        while True:
            time.sleep(0.05)

    def reward(prompts, responses, answers):
        rollout = len(prompts) > 1 and prompts[0] == prompts[1]
        if not rollout and os.environ.get("ASTRAI_TEST_HANG_CHECK") == "1":
            _hang()
        if rollout:
            counter = Path(os.environ["ASTRAI_TEST_COUNTER"])
            with counter.open("a") as f:
                f.write("x")
            if len(counter.read_text()) == int(os.environ.get("ASTRAI_TEST_HANG_AT", "0")):
                _hang()
        # 1, 0, 1, 0, ...: every group's rewards vary, so every step trains
        return [float(i % 2 == 0) for i in range(len(responses))]
    """
)
ARGS = [
    "debug=quick",
    "trainer.total_steps=4",
    "trainer.eval_every=100",
    "reward=custom",
    "reward._target_=hang_reward.reward",
    *LAG_1,
]


def _env(tmp_path: Path, name: str, hang_at: int = 0, hang_check: bool = False) -> dict[str, str]:
    (tmp_path / "hang_reward.py").write_text(REWARD_MODULE)
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "ASTRAI_TEST_COUNTER": str(tmp_path / f"{name}.calls"),
        "ASTRAI_TEST_HANG_AT": str(hang_at),
        "ASTRAI_TEST_HANG_CHECK": "1" if hang_check else "0",
    }


def _run(tmp_path: Path, run_dir: Path, env: dict[str, str], extra: list[str]) -> str:
    result = subprocess.run(
        [sys.executable, TRAIN, *ARGS, *extra, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result.stdout + result.stderr


def _stop_at_mark(
    tmp_path: Path,
    run_dir: Path,
    env: dict[str, str],
    extra: list[str],
    signalled: bool,
    signals: int = 1,
) -> tuple[int, str, float]:
    """Run train.py; when the reward says it hangs, SIGTERM it (``signalled``: ``signals``
    times, 50 ms apart) or let the budget run out. Returns (exit code, output, seconds from
    the mark to the exit)."""
    proc = subprocess.Popen(
        [sys.executable, TRAIN, *ARGS, *extra, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 180
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("MARK hanging"):
            break
        assert time.monotonic() < deadline, "".join(lines)[-3000:]
    marked = time.monotonic()
    if signalled:
        time.sleep(0.5)  # the training thread is waiting by now (or a checkpoint is)
        for _ in range(signals):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                time.sleep(0.05)
    try:
        rest, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
        pytest.fail("the run did not stop: " + ("".join(lines) + rest)[-3000:])
    return proc.returncode, "".join(lines) + rest, time.monotonic() - marked


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/"))} for r in rows]


def _assert_stopped_at_step_2(run_dir: Path, output: str, reason: str) -> None:
    """Step 2 saved, step 3's rollout (hung) not counted as in flight but re-issuable, the
    run dir unlocked."""
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))[-1] == "step_2"
    step_2 = run_dir / "checkpoints" / "step_2"
    state = json.loads((step_2 / "trainer_state.json").read_text())
    assert "in_flight" not in state and not (step_2 / "in_flight.pt").exists()
    assert [job["step"] for job in state["reissue"]] == [3]
    assert (step_2 / "reissue.pt").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped"] == reason and summary["step"] == 2, summary
    assert "Traceback" not in output
    with (run_dir / ".astrai.lock").open("a") as lock:  # the run ended: nobody holds it
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.slow  # ~25 s: three train.py runs
def test_sigterm_while_a_checkpoint_waits_on_a_hung_rollout_saves_and_resumes_exactly(
    tmp_path: Path,
) -> None:
    """Lag 1, step 3's reward hangs on the sampling thread; step 2's checkpoint waits for it:
    SIGTERM abandons it, step 2 is saved with step 3 re-issuable, exit 0; the resumed run
    samples step 3 again as the straight run did (bitwise equal weights and metrics)."""
    straight = tmp_path / "straight"
    _run(tmp_path, straight, _env(tmp_path, "straight"), ["ckpt.every_steps=1"])

    stopped = tmp_path / "stopped"
    env = _env(tmp_path, "stopped", hang_at=3)
    code, output, took = _stop_at_mark(tmp_path, stopped, env, ["ckpt.every_steps=1"], True)
    assert code == 0, output[-3000:]
    assert took < 0.5 + 10, output[-3000:]  # the bound: a checkpoint write + ~1 s, generously
    _assert_stopped_at_step_2(stopped, output, "SIGTERM")
    assert "rollout of step 3, not finished, is abandoned" in output

    check = subprocess.run(
        [sys.executable, "-m", "astrai.checkpoints", "verify", str(stopped / "checkpoints")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr  # verify OK: resume takes it
    _run(tmp_path, stopped, _env(tmp_path, "resumed"), ["ckpt.every_steps=1"])
    a = load_file(str(straight / "checkpoints" / "step_4" / "model.safetensors"))
    b = load_file(str(stopped / "checkpoints" / "step_4" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _rows(straight) == _rows(stopped)


@pytest.mark.slow  # ~15 s: one train.py run, most of it the budget
def test_the_budget_ends_a_run_whose_rollout_hangs_on_the_sampling_thread(tmp_path: Path) -> None:
    """The same hang with ``trainer.max_duration`` (from start-up) and no SIGTERM: the run
    stops on its budget, step 2 saved, exit 0 (it used to wait forever)."""
    run_dir = tmp_path / "run"
    env = _env(tmp_path, "budget", hang_at=3)
    extra = ["ckpt.every_steps=1", "trainer.max_duration=12s"]
    code, output, took = _stop_at_mark(tmp_path, run_dir, env, extra, False)
    assert code == 0, output[-3000:]
    assert took < 12 + 10, output[-3000:]
    _assert_stopped_at_step_2(run_dir, output, "max_duration")


@pytest.mark.slow  # ~8 s: one train.py run
def test_sigterm_while_the_training_thread_waits_for_a_hung_rollout(tmp_path: Path) -> None:
    """No checkpoint on schedule: the training thread itself waits for step 3's rollout; a
    SIGTERM abandons the wait, step 2 is saved (step 3 re-issuable), exit 0."""
    run_dir = tmp_path / "run"
    env = _env(tmp_path, "wait", hang_at=3)
    code, output, took = _stop_at_mark(tmp_path, run_dir, env, ["ckpt.every_steps=0"], True)
    assert code == 0, output[-3000:]
    assert took < 0.5 + 10, output[-3000:]
    _assert_stopped_at_step_2(run_dir, output, "SIGTERM")
    assert "stopped (SIGTERM) while sampling step 3" in output


@pytest.mark.slow  # ~8 s: one train.py run
def test_a_second_sigterm_ends_at_once_with_the_checkpoints_on_disk_complete(
    tmp_path: Path,
) -> None:
    """Two SIGTERMs 50 ms apart while step 2's checkpoint waits on the hung rollout: the run
    ends at once (by the signal, 143, or exit 0 when the stop had completed), and every
    ``step_N`` on disk is complete (written under a temporary name, then renamed)."""
    from astrai.checkpoints.completeness import checkpoint_problems

    run_dir = tmp_path / "run"
    env = _env(tmp_path, "twice", hang_at=3)
    code, output, took = _stop_at_mark(
        tmp_path, run_dir, env, ["ckpt.every_steps=1"], True, signals=2
    )
    assert code in (0, -signal.SIGTERM), output[-3000:]
    assert took < 0.5 + 10, output[-3000:]
    steps = sorted((run_dir / "checkpoints").glob("step_*"))
    assert [p.name for p in steps][:1] == ["step_1"], steps
    assert all(checkpoint_problems(p) == [] for p in steps), [checkpoint_problems(p) for p in steps]


@pytest.mark.slow  # ~6 s each: one train.py run
@pytest.mark.parametrize("signalled", [True, False], ids=["sigterm", "max_duration"])
def test_a_hung_pre_run_check_ends_at_a_stop(tmp_path: Path, signalled: bool) -> None:
    """The pre-run reward check hangs during start-up: SIGTERM, or the budget counted from
    start-up, ends it at once, exit 0; ``.hydra/`` and ``train.log`` stay and say why."""
    run_dir = tmp_path / "run"
    env = _env(tmp_path, "check", hang_check=True)
    extra = [] if signalled else ["trainer.max_duration=5s"]
    code, output, took = _stop_at_mark(tmp_path, run_dir, env, extra, signalled)
    assert code == 0, output[-3000:]
    assert took < (0.5 if signalled else 5) + 5, output[-3000:]
    reason = "SIGTERM" if signalled else "max_duration"
    line = f"stopped ({reason}) during start-up: no step taken, nothing to save"
    assert line in output and "Traceback" not in output
    assert line in (run_dir / "train.log").read_text()
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert not (run_dir / "checkpoints").exists()
    with (run_dir / ".astrai.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


# about 1e10 iterations of Jinja's compiled Python: a template that never finishes rendering
LOOPING_TEMPLATE = (
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    "{% for m in messages %}{{ m['content'] }}{% endfor %}"
)


@pytest.mark.slow  # ~10 s: one train.py start, stopped while it renders
def test_sigterm_ends_a_start_up_stuck_in_a_looping_chat_template(tmp_path: Path) -> None:
    """The chat template loops while the pre-run check renders the first prompts: the run is
    still starting after 8 s, and a SIGTERM ends it within a few seconds, exit 0."""
    from astrai.models.llama import LlamaConfig, LlamaForCausalLM
    from astrai.models.pretrained import save_policy_dir
    from astrai.models.tokenizer import CharTokenizer

    torch.manual_seed(0)
    config = LlamaConfig(
        num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    save_policy_dir(LlamaForCausalLM(config), CharTokenizer(), model_dir)
    (model_dir / "chat_template.jinja").write_text(LOOPING_TEMPLATE)
    run_dir = tmp_path / "run"
    args = ["model=hf", f"model.path={model_dir}", "train_type.sampling.max_new_tokens=8"]
    proc = subprocess.Popen(
        [sys.executable, TRAIN, *args, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        time.sleep(8)
        assert proc.poll() is None, "the run ended before the signal"
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        output, _ = proc.communicate(timeout=30)
        took = time.monotonic() - signalled
    finally:
        proc.kill()
    assert proc.returncode == 0, output[-3000:]
    assert took < 5, output[-3000:]
    assert "stopped (SIGTERM) during start-up: no step taken, nothing to save" in output
    assert "Traceback" not in output
    assert "astrai: online_grpo on addition" not in output  # the banner: after the check
    assert not (run_dir / "checkpoints").exists()
