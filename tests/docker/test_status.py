"""docker/status.py (`make docker-status`): each named job's state from its run dir and its kept
container, and the two tables, with a fake ``docker`` first on PATH (the real engine:
tests/docker_e2e)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.checkpoints.checkpoint_dirs import write_checkpoint
from tests.helpers import run_main, script_module

REPO_ROOT = Path(__file__).resolve().parents[2]
STATUS = REPO_ROOT / "docker" / "status.py"


def _run_dir(
    outputs: Path,
    name: str,
    steps: int,
    total: int = 10,
    summary: dict | None = None,
    checkpoint: int | None = None,
) -> Path:
    """A named job's run dir as the launcher and the trainer leave it."""
    run_dir = outputs / name
    run_dir.mkdir(parents=True)
    container = "astrai-" + name.replace("/", "-")
    (run_dir / "docker-job.json").write_text(json.dumps({"job_name": name, "container": container}))
    (run_dir / "config.yaml").write_text(f"trainer:\n  total_steps: {total}\n")
    rows = [{"step": s, "rollout/reward_mean": 0.5} for s in range(steps + 1)]
    for row in rows:
        if row["step"] % 5 == 0:
            row["eval/accuracy"] = row["step"] / 10
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"st')
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))
    if checkpoint is not None:
        write_checkpoint(run_dir / "checkpoints", checkpoint)
    return run_dir


def _fake_docker(bin_dir: Path, containers: list[dict] | None) -> None:
    """``docker ps -aq`` / ``docker inspect`` answering with ``containers``; None: no engine."""
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    if containers is None:
        body = 'echo "Cannot connect to the Docker daemon at unix:///x.sock." >&2; exit 1'
    else:
        ids = " ".join(c["Id"] for c in containers)
        calls = shlex.quote(str(bin_dir / "calls.txt"))
        body = (
            f'echo "$*" >> {calls}\n'
            f'case "$1" in\n  ps) echo {shlex.quote(ids)} ;;\n'
            f"  inspect) echo {shlex.quote(json.dumps(containers))} ;;\n"
            '  *) echo "unexpected $*" >&2; exit 99 ;;\nesac'
        )
    docker.write_text(f"#!/bin/bash\n{body}\n")
    docker.chmod(0o755)


def _container(name: str, status: str, exit_code: int, job: str, run_dir: Path) -> dict:
    labels = {"astrai.job": job, "astrai.run_dir": str(run_dir)}
    return {
        "Id": name + "-id",
        "Name": "/" + name,
        "State": {"Status": status, "ExitCode": exit_code},
        "Config": {"Labels": labels},
    }


@pytest.fixture(scope="module")
def status_main() -> Iterator[Callable[[list[str]], int]]:
    """docker/status.py's ``main`` (a script, no package), run in this process: a child
    process would cost a torch import per call."""
    with script_module(STATUS, "docker_status") as module:
        yield module.main


@pytest.fixture
def status(
    tmp_path: Path, status_main: Callable[[list[str]], int], monkeypatch: pytest.MonkeyPatch
) -> Callable[[Path, list[dict] | None], list[str]]:
    """The status lines for an outputs dir, the fake docker answering with ``containers``."""

    def lines(outputs: Path, containers: list[dict] | None) -> list[str]:
        _fake_docker(tmp_path / "bin", containers)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
        result = run_main(status_main, [str(outputs)])
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    return lines


def _row(lines: list[str], job: str) -> list[str]:
    return next(line.split() for line in lines if line.split()[:1] == [job])


@pytest.fixture
def outputs(tmp_path: Path) -> Path:
    outputs = tmp_path / "outputs"
    stopped = {"step": 7, "stopped": "SIGTERM", "train_type": "online_grpo"}
    _run_dir(outputs, "running", 3, checkpoint=2)
    _run_dir(outputs, "stopped", 7, summary=stopped, checkpoint=7)
    _run_dir(outputs, "done", 10, summary={"step": 10, "stopped": None}, checkpoint=10)
    _run_dir(outputs, "failed", 4, summary={"step": 2, "stopped": None}, checkpoint=2)
    _run_dir(outputs, "killed", 6, summary={"step": 5, "stopped": "SIGTERM"}, checkpoint=5)
    _run_dir(outputs, "sweep/0", 10, summary={"step": 10, "stopped": None})
    (outputs / "not-a-job").mkdir()  # no docker-job.json: not listed
    return outputs


def test_each_state_from_the_run_dir_and_the_kept_container(
    tmp_path: Path, outputs: Path, status: Callable
) -> None:
    containers = [
        _container("astrai-running", "running", 0, "running", outputs / "running"),
        _container("astrai-stopped", "exited", 0, "stopped", outputs / "stopped"),
        _container("astrai-failed", "exited", 2, "failed", outputs / "failed"),
        _container("astrai-trainer-run-1a2b", "running", 0, "-", tmp_path / "multirun/0"),
    ]
    lines = status(outputs, containers)
    assert lines[0] == "containers:" and lines[1].split() == [
        "CONTAINER",
        "STATE",
        "JOB",
        "RUN",
        "DIR",
    ]
    assert _row(lines, "astrai-failed")[:4] == ["astrai-failed", "exited", "(2)", "failed"]
    assert _row(lines, "astrai-trainer-run-1a2b")[1:3] == ["running", "-"]
    assert f"named jobs in {outputs}/:" in lines
    # JOB STATE STEP EVAL/ACCURACY (step) CHECKPOINT RUN-DIR; the torn last metrics line is skipped
    assert _row(lines, "running")[:6] == ["running", "running", "3/10", "0.000", "(step", "0)"]
    assert _row(lines, "running")[6] == "step_2"
    assert _row(lines, "stopped")[:5] == ["stopped", "stopped", "(SIGTERM)", "7/10", "0.500"]
    assert _row(lines, "stopped")[7] == "step_7"
    assert _row(lines, "done")[:4] == ["done", "done", "10/10", "1.000"]
    assert _row(lines, "failed")[:4] == ["failed", "failed", "(exit", "2)"]  # summary is older
    # a stale summary and no container (killed, engine restarted): interrupted
    assert _row(lines, "killed")[:3] == ["killed", "interrupted", "6/10"]
    assert _row(lines, "sweep/0")[:3] == ["sweep/0", "done", "10/10"]
    assert not any(line.split()[:1] == ["not-a-job"] for line in lines)


def test_without_an_engine_the_jobs_are_still_listed(outputs: Path, status: Callable) -> None:
    lines = status(outputs, None)
    assert lines[1].startswith(
        "  Docker engine not reachable (docker ps -aq: Cannot connect to the Docker"
    )
    assert lines[1].endswith("containers unknown")
    # without the engine a job with no current summary may be running: not called interrupted
    assert _row(lines, "running")[1:5] == ["unknown", "(engine", "not", "reachable)"]
    assert _row(lines, "done")[1] == "done"


def test_no_named_job(tmp_path: Path, status: Callable) -> None:
    lines = status(tmp_path / "empty", [])
    assert lines == [
        "containers:",
        "  no astrai trainer container",
        f"named jobs in {tmp_path / 'empty'}/:",
        "  none (make docker-train NAME=<name> starts one)",
    ]


def test_only_this_users_containers_are_listed(
    tmp_path: Path, outputs: Path, status: Callable
) -> None:
    """On a shared engine the table is yours: ``docker ps`` asks for the launcher's
    ``astrai.user=<uid>`` label (issue 32)."""
    status(outputs, [])
    (ps,) = [c for c in (tmp_path / "bin" / "calls.txt").read_text().splitlines() if c[:2] == "ps"]
    assert f"--filter label=astrai.user={os.getuid()}" in ps
    assert "--filter label=com.docker.compose.service=trainer" in ps
