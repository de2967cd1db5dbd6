"""The Docker workflow against a real engine, with the project's own commands only
(`make docker-build`, `make docker-train`, `make docker-stop`, `make docker-status`, the
launcher). Run by `make test-docker`, which brings up a private engine first
(tests/docker_e2e/engine.sh) and tears it down after; these tests fail, never skip, when no
engine answers.

The tests share one engine and image and run in file order: the image is built as root first,
then again for the container user ``ASTRAI_UID=1000`` (only its last layer changes), which every
later test runs as, so files written into the mounts must belong to uid 1000.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra_plugins.astrai_docker_launcher._host import launching_user

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
USER = {"ASTRAI_UID": "1000", "ASTRAI_GID": "1000"}
# a few seconds of CPU training per job; eval every 5 steps
SHORT = ["debug=quick", "trainer.eval_every=5"]
STEPS = 40  # long enough to be stopped mid-run (a step takes ~0.1-0.3 s here)
NOT_COMPARED = ("time/", "perf/")  # wall-clock metrics differ between any two runs
# named jobs' containers are astrai-<launching user>-<name> (root here: "astrai-root-")
NAMED = f"astrai-{launching_user()[1]}-"


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        pytest.fail(f"docker {' '.join(args)}: {result.stderr.strip()}")
    return result


def make(target: str, *, env: dict[str, str] | None = None, timeout: int = 900, **variables: str):
    """``make TARGET VAR=value ...`` from the repo root; the finished process."""
    command = ["make", "--no-print-directory", target]
    command += [f"{key}={value}" for key, value in variables.items()]
    print("$", " ".join(shlex.quote(c) for c in command), flush=True)
    return subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def _args(*overrides: str) -> str:
    return " ".join(shlex.quote(o) for o in overrides)


def _metric_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return rows


def _compared(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(NOT_COMPARED)}


def _wait_for_step(run_dir: Path, step: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = _metric_rows(run_dir)
        if rows and rows[-1]["step"] >= step:
            return
        time.sleep(0.2)
    pytest.fail(f"{run_dir}: no step {step} in metrics.jsonl after {timeout_s:.0f}s")


def _container_exit(name: str) -> int:
    """Wait for container ``name`` to exit; its exit code."""
    return int(_docker("wait", name).stdout.strip())


def _owners(run_dir: Path) -> set[int]:
    """Owner uids of what the container wrote (the launcher's own docker.log / docker-job.json
    are written on the host)."""
    host_files = {"docker.log", "docker-job.json"}
    return {p.stat().st_uid for p in run_dir.rglob("*") if p.name not in host_files}


def _complete_checkpoint(run_dir: Path, step: int) -> Path:
    path = run_dir / "checkpoints" / f"step_{step}"
    result = subprocess.run(
        [sys.executable, "-m", "astrai.checkpoints", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return path


@pytest.fixture(scope="module")
def engine() -> None:
    """The engine `make test-docker` started: fail loudly when there is none."""
    if not os.environ.get("DOCKER_HOST"):
        pytest.fail("no DOCKER_HOST: run these tests through `make test-docker`")
    info = _docker("info", "--format", "{{.ServerVersion}}", check=False)
    if info.returncode != 0:
        pytest.fail(f"the Docker engine does not answer: {info.stderr.strip()}")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Host folders for this module's mounts and sweeps, readable by the container user."""
    path = tmp_path_factory.mktemp("docker-e2e")
    path.chmod(0o755)
    for parent in path.parents:  # pytest's base temp dir is private to its user
        if parent == Path(tmp_path_factory.getbasetemp()).parent:
            break
        parent.chmod(parent.stat().st_mode | 0o005)
    return path


def _mounts(root: Path) -> list[str]:
    """Mount folders that do not exist yet: the launcher creates them."""
    return [f"infra.mounts.{key}={root / key}" for key in ("data", "models", "outputs")]


def test_engine_down_compose_and_image_errors_name_their_cause(engine: None, work: Path) -> None:
    mounts = _mounts(work / "preflight")
    down = make(
        "docker-preflight",
        env={"DOCKER_HOST": f"unix://{work}/no-engine.sock"},
        GPUS="none",
        ARGS=_args(*mounts),
    )
    assert down.returncode == 2
    assert "astrai: docker error: Docker engine not reachable" in down.stderr
    assert "make docker-build" not in down.stderr  # not the missing image
    missing = make(
        "docker-preflight", GPUS="none", ARGS=_args(*mounts, "infra.container.image=astrai:nope")
    )
    assert missing.returncode == 2
    assert "image astrai:nope not found; build it with `make docker-build`" in missing.stderr
    # the default asks for GPUs: this engine has no NVIDIA runtime, and says so
    gpus = make("docker-preflight", ARGS=_args(*mounts))
    assert gpus.returncode == 2 and "no NVIDIA runtime" in gpus.stderr
    # the mounts were created on the way, empty
    assert sorted(p.name for p in (work / "preflight").iterdir()) == ["data", "models", "outputs"]


def test_build_as_root_and_a_cpu_job(engine: None, work: Path) -> None:
    _ok(make("docker-build", env={"ASTRAI_UID": "0", "ASTRAI_GID": "0"}))
    # the image carries the hash of the code it copied, the checkout's
    label = '{{index .Config.Labels "astrai.source_hash"}}'
    built = _docker("image", "inspect", "--format", label, "astrai:latest").stdout.strip()
    checkout = subprocess.run(
        ["python3", str(REPO / "docker" / "source_hash.py")],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert len(built) == 64 and built == checkout
    preflight = _ok(
        make(
            "docker-preflight",
            env={"ASTRAI_UID": "0"},
            GPUS="none",
            ARGS=_args(*_mounts(work / "root")),
        )
    )
    assert "warning" not in preflight.stderr  # the label matched: no "may run other code"
    probe = REPO / "e2e_source_probe.py"  # code added after the build: the image lacks it
    try:
        probe.write_text("# written after make docker-build\n")
        stale = make(
            "docker-preflight", env={"ASTRAI_UID": "0"}, GPUS="none",
            ARGS=_args(*_mounts(work / "root")),
        )  # fmt: skip
        assert stale.returncode != 0 and "was built from other code" in stale.stderr
    finally:
        probe.unlink(missing_ok=True)
    result = _ok(
        make(
            "docker-train",
            env={"ASTRAI_UID": "0", "ASTRAI_GID": "0"},
            NAME="e2e-root",
            GPUS="none",
            ARGS=_args(*_mounts(work / "root"), *SHORT),
        )
    )
    run_dir = work / "root" / "outputs" / "e2e-root"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["step"] == 2 and summary["stopped"] is None, result.stdout[-2000:]
    assert _owners(run_dir) == {0}


def test_a_cpu_job_as_a_non_root_user(engine: None, work: Path) -> None:
    _ok(make("docker-build", env=USER))
    uid = _docker("run", "--rm", "--entrypoint", "id", "astrai:latest", "-u").stdout.strip()
    assert uid == "1000"  # the image's own user
    # a host NCCL_SOCKET_IFNAME names the host's interface: it must not reach the container
    host_nccl = {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN"}
    _ok(
        make(
            "docker-train",
            env=USER | host_nccl,
            NAME="e2e-cpu",
            GPUS="none",
            ARGS=_args(*_mounts(work), *SHORT),
        )
    )
    run_dir = work / "outputs" / "e2e-cpu"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["step"] == 2 and summary["stopped"] is None
    assert [row["step"] for row in _metric_rows(run_dir)] == [0, 1, 2]
    assert any((run_dir / "tb").iterdir())
    _complete_checkpoint(run_dir, 2)
    assert _owners(run_dir) == {1000}
    # the named job's container is kept, exited 0, until the job starts again
    container = f"{NAMED}e2e-cpu"
    assert _container_exit(container) == 0
    _shared_engine_settings(container)


def _shared_engine_settings(container: str) -> None:
    """Issue 32, as the engine applied it to a kept container: its user's label, a bounded
    json-file log, /data and /models read-only (a write there is refused), no host interface
    name in its environment."""
    (record,) = json.loads(_docker("inspect", container).stdout)
    assert record["Config"]["Labels"]["astrai.user"] == str(os.getuid())
    assert record["HostConfig"]["LogConfig"] == {
        "Type": "json-file",
        "Config": {"max-file": "3", "max-size": "50m"},
    }
    writable = {m["Destination"]: m["RW"] for m in record["Mounts"]}
    assert (writable["/data"], writable["/models"], writable["/outputs"]) == (False, False, True)
    env = record["Config"]["Env"]
    assert "NCCL_DEBUG=WARN" in env and not any(e.startswith("NCCL_SOCKET_IFNAME=") for e in env)
    # the container user owns /data on the host (the launcher made it): only the mount refuses
    touch = ["--volumes-from", container, "--user", "1000:1000", "--entrypoint", "touch"]
    refused = _docker("run", "--rm", *touch, "astrai:latest", "/data/x", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused


def test_a_two_job_sweep_through_the_launcher(engine: None, work: Path) -> None:
    sweep = work / "sweep"
    command = [
        str(REPO / ".venv" / "bin" / "python"),
        "train.py",
        "-m",
        "hydra/launcher=docker",
        "infra=docker",
        "infra.gpu.devices=none",
        "seed=0,1",
        f"hydra.sweep.dir={sweep}",
        *_mounts(work),
        *SHORT,
    ]
    result = subprocess.run(
        command, cwd=REPO, env={**os.environ, **USER}, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for num in (0, 1):
        summary = json.loads((sweep / str(num) / "summary.json").read_text())
        assert summary["step"] == 2 and summary["run_dir"] == str(sweep / str(num))
        assert _owners(sweep / str(num)) == {1000}
    # unnamed containers are removed when they exit; only named jobs' containers are kept
    kept = _docker(
        "ps", "-a", "--format", "{{.Names}}", "--filter", "label=com.docker.compose.service=trainer"
    )
    assert all(name.startswith(f"{NAMED}e2e-") for name in kept.stdout.split()), kept.stdout


def _stop_and_resume(work: Path, name: str, extra: list[str], stop_after: int) -> Path:
    """Start job ``name`` detached, ``make docker-stop NAME=`` it after step ``stop_after``,
    check the stop, then run the same command again to the end; the run dir."""
    args = _args(*_mounts(work), *SHORT, f"trainer.total_steps={STEPS}", *extra)
    job = {"NAME": name, "GPUS": "none", "DETACH": "1", "ARGS": args}
    run_dir = work / "outputs" / name
    _ok(make("docker-train", env=USER, **job))
    _wait_for_step(run_dir, stop_after)
    # another user's `make docker-stop` (no NAME) leaves this user's trainer running
    other = _ok(make("docker-stop", OWNER="4242"))
    assert "no running astrai trainer container of user 4242" in other.stdout
    state = _docker("inspect", "--format", "{{.State.Running}}", f"{NAMED}{name}").stdout
    assert state.strip() == "true"
    stopped = _ok(make("docker-stop", NAME=name))
    assert "SIGTERM" in stopped.stdout
    assert _container_exit(f"{NAMED}{name}") == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped"] == "SIGTERM" and stop_after <= summary["step"] < STEPS
    _complete_checkpoint(run_dir, summary["step"])
    status = _ok(make("docker-status", STATUS_DIRS=str(work / "outputs"))).stdout
    line = next(line for line in status.splitlines() if line.strip().startswith(f"{name} "))
    assert "stopped (SIGTERM)" in line and f"{summary['step']}/{STEPS}" in line

    _ok(make("docker-train", env=USER, **job))  # the same command: resumes
    assert _container_exit(f"{NAMED}{name}") == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["step"] == STEPS and summary["stopped"] is None
    assert _owners(run_dir) == {1000}
    return run_dir


def test_a_stopped_named_job_resumes_to_the_same_end(engine: None, work: Path) -> None:
    # an evaluation every step: a stop during an update or an evaluation abandons one, which
    # the resumed run must run first (``eval_pending``) for the rows to match
    every_step = ["trainer.eval_every=1"]
    resumed = _stop_and_resume(work, "e2e-stop", every_step, stop_after=3)
    whole = work / "outputs" / "e2e-whole"
    args = _args(*_mounts(work), *SHORT, f"trainer.total_steps={STEPS}", *every_step)
    _ok(make("docker-train", env=USER, NAME="e2e-whole", GPUS="none", ARGS=args))
    rows, reference = _metric_rows(resumed), _metric_rows(whole)
    assert [r["step"] for r in rows] == [r["step"] for r in reference] == list(range(STEPS + 1))
    # exact resume, in the container too: every logged value as in the uninterrupted run
    assert [_compared(r) for r in rows] == [_compared(r) for r in reference]
    status = _ok(make("docker-status", STATUS_DIRS=str(work / "outputs"))).stdout
    print(status)
    for name in ("e2e-stop", "e2e-whole"):
        line = next(line for line in status.splitlines() if line.strip().startswith(f"{name} "))
        assert "done" in line and f"{STEPS}/{STEPS}" in line


def test_a_two_process_job_in_one_container_stops_and_resumes(engine: None, work: Path) -> None:
    run_dir = _stop_and_resume(work, "e2e-ddp", ["infra.nproc_per_node=2"], stop_after=3)
    config = (run_dir / "config.yaml").read_text()
    assert "nproc_per_node: 2" in config
