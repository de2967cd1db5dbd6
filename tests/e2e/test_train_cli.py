"""``python train.py`` as a user runs it: bad overrides fail cleanly, tiny runs complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tests.train_runs import (
    LAG_1,
    QUICK,
    TRAIN,
    checkpoint_weights,
    last_logged_step,
    run_train,
    run_train_in_process,
)

# one real ``python train.py`` process for a config error; every other row runs the same
# ``main`` in-process (tests/train_runs.py), a torch import cheaper each. A checkpoint error in a
# real process (5.5 s here: moved for issue 62's fast tests) is the slow lane's
# (tests/e2e/test_sweep.py::test_report_marks_running_and_failed_jobs) and the launcher's
# (tests/launcher/test_launcher.py, its container's train.py)
REAL_PROCESS = {"train_type=nope"}


def run_row(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    real = " ".join(args) in REAL_PROCESS
    return run_train(args, cwd=cwd) if real else run_train_in_process(args, cwd=cwd)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        (
            "train_type=nope",
            "train_type=nope is not an option (choose from online_grpo, online_ppo)",
        ),
        # unknown keys and wrong types: test_compose_errors_are_one_line_and_exit_2
        ("+infra.environment={PATH:/nonexistent}", "infra.environment.PATH cannot be set"),
        ("ckpt.resume=/nonexistent/step_3", "ckpt.resume: no checkpoint directory"),
        # validate_config's checks through main, each also tested in tests/config
        ("train_type.group_size=1", "train_type.group_size"),
        ("model.hidden_size=-3", "model.hidden_size"),
        ("train_type.clip_eps=abc", "train_type.clip_eps"),
        ("infra.gpu.devices=[1,1]", "infra.gpu.devices"),
        ("train_type=online_ppo critic=none", "critic=value_model"),
        ("train_type=online_ppo train_type.ppo_gamma=1.5", "train_type.ppo_gamma"),
        ("train_type=online_ppo train_type.ppo_gae_lambda=-1", "train_type.ppo_gae_lambda"),
        ("train_type=online_ppo train_type.kl_estimator=k7", "train_type.kl_estimator"),
        ("trainer.max_duration=2weeks", "trainer.max_duration"),
        ("ckpt.keep_last=0", "ckpt.keep_last"),
        ("ckpt.every_steps=-1", "ckpt.every_steps"),
    ],
)
def test_bad_override_exits_nonzero_with_one_clear_message(
    tmp_path: Path, override: str, needle: str
) -> None:
    result = run_row(override.split(), cwd=tmp_path)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith(("astrai: config error: ", "astrai: checkpoint error: "))
    assert len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written: no outputs/ folder


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["trainer.total_step=10"],
            "trainer.total_step is not a config key (did you mean trainer.total_steps?)",
        ),
        # each also in-process in tests/config/test_keys.py
        (
            ["+trainer.total_step=10"],
            "trainer.total_step is not a config key (did you mean trainer.total_steps?)",
        ),
        (
            ["train_type=base_online_ppo"],
            "train_type=base_online_ppo is not an option (did you mean train_type=online_ppo? "
            "choose from online_grpo, online_ppo)",
        ),
        (
            ["trainer.total_steps=ten"],
            "trainer.total_steps=ten: Value 'ten' of type 'str' could not be converted to Integer",
        ),
        (  # the same check as with -m below
            ["+experiment=ppo_sweep"],
            "+experiment=ppo_sweep: drop the + (experiment=ppo_sweep)",
        ),
        (
            ["-m", "+experiment=ppo_sweep"],
            "+experiment=ppo_sweep: drop the + (experiment=ppo_sweep)",
        ),
        (["+debug=quick"], "+debug=quick: drop the + (debug=quick)"),
    ],
)
def test_compose_errors_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = run_row(args, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, f"astrai: config error: {message}\n")
    assert list(tmp_path.iterdir()) == []


def test_help_is_astrais_page_and_hydra_help_hydras(tmp_path: Path) -> None:
    from astrai.config.help import help_text

    result = run_train_in_process(["--help"], cwd=tmp_path)  # main, in this process
    assert (result.returncode, result.stdout) == (0, help_text() + "\n")
    assert "  train_type  online_grpo*, online_ppo\n" in result.stdout
    assert "base_" not in result.stdout
    hydra_help = run_train_in_process(["--hydra-help"], cwd=tmp_path)  # main, in this process
    assert hydra_help.returncode == 0
    assert hydra_help.stdout.startswith("Hydra (1.3")


@pytest.mark.slow  # ~7 s: a real run through python -m
def test_python_m_astrai_train_runs_like_train_py(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "astrai.train",
            *QUICK,
            "trainer.total_steps=1",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((run_dir / "summary.json").read_text())["step"] == 1
    assert "astrai.train" in (run_dir / "train.log").read_text()  # not __main__


@pytest.mark.parametrize(
    "task",
    [
        "addition",
        pytest.param("reverse", marks=pytest.mark.slow),
        pytest.param("sort", marks=pytest.mark.slow),
    ],
)  # addition: the fast suite's real train.py run (~4 s); the other two through main in-process
def test_each_builtin_task_runs(tmp_path: Path, task: str) -> None:
    run_dir = tmp_path / "run"
    run = run_train if task == "addition" else run_train_in_process
    result = run([f"task={task}", *QUICK, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["step"] == 2
    assert 0.0 <= summary["eval/accuracy"] <= 1.0
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert (run_dir / "config.yaml").is_file()
    assert "done: 2 steps" in result.stdout  # the final console line


# --- graceful stop and resume through the real CLI ------------------------------------------

LONG = [
    "debug=quick",
    "trainer.total_steps=150",
    "trainer.eval_every=50",
    "ckpt.every_steps=0",
]


@pytest.mark.slow  # ~20 s each: three runs of train.py
@pytest.mark.parametrize("extra", [[], LAG_1], ids=["sync", "lag"])
def test_sigterm_checkpoints_exits_0_and_the_resumed_run_matches(
    tmp_path: Path, extra: list[str]
) -> None:
    straight = tmp_path / "straight"
    result = run_train([*LONG, *extra, f"hydra.run.dir={straight}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]

    stopped = tmp_path / "stopped"
    args = [sys.executable, TRAIN, *LONG, *extra, f"hydra.run.dir={stopped}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while last_logged_step(stopped) < 3 and time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be stopped"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    summary = json.loads((stopped / "summary.json").read_text())
    assert summary["stopped"] == "SIGTERM"
    k = summary["step"]
    assert 3 <= k < 150
    assert summary["checkpoint"] == str(stopped / "checkpoints" / f"step_{k}")
    assert f"stopped (SIGTERM): {k} steps" in out
    in_flight = stopped / "checkpoints" / f"step_{k}" / "in_flight.pt"
    assert in_flight.is_file() == bool(extra)  # step k + 1's rollout, sampled while k updated

    resumed = run_train([*LONG, *extra, f"hydra.run.dir={stopped}"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((stopped / "summary.json").read_text())["step"] == 150
    a = checkpoint_weights(straight / "checkpoints" / "step_150" / "model.safetensors")
    b = checkpoint_weights(stopped / "checkpoints" / "step_150" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[name], b[name]) for name in a)
    steps = [json.loads(line)["step"] for line in (stopped / "metrics.jsonl").open()]
    assert steps == list(range(151))


def test_a_time_budget_spent_during_start_up_stops_it_with_exit_0(tmp_path: Path) -> None:
    """The budget counts from start-up (issue 45) and runs out there: start-up ends at once, no
    step, exit 0, the job log says so (tests/e2e/test_time_budget_cli.py stops a hung step with
    its checkpoint; tests/e2e/test_stop_every_phase.py a hung pre-run check)."""
    run_dir = tmp_path / "run"
    args = [*LONG, "trainer.max_duration=0.001s", f"hydra.run.dir={run_dir}"]
    result = run_train_in_process(args, tmp_path)  # main, in this process
    assert result.returncode == 0, result.stderr[-2000:]
    line = "stopped (max_duration) during start-up: no step taken, nothing to save"
    assert line in result.stdout and line in (run_dir / "train.log").read_text()
    assert not (run_dir / "summary.json").exists()
    assert not list((run_dir / "checkpoints").glob("step_*"))
