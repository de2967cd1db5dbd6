"""The Docker launcher through Hydra: discovery, guards, and real multiruns whose jobs a fake
``docker`` on PATH runs on this machine."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra._internal.callbacks import Callbacks
from hydra._internal.utils import run_and_report
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.types import HydraContext, RunMode
from hydra_plugins.astrai_docker_launcher import _core
from hydra_plugins.astrai_docker_launcher._core import DockerJobError, Job
from hydra_plugins.astrai_docker_launcher._host import launching_user
from omegaconf import OmegaConf
from tests.helpers import wait_for_rows
from tests.launcher.helpers import install_fake_docker, read_calls
from tests.train_runs import QUICK, REPO, run_train, run_train_in_process

from astrai.config.store import register_configs
from astrai.paths import CONFIG_DIR


def _mounts(tmp_path: Path) -> list[str]:
    """Host folders for /data /models /outputs (the launcher requires them to exist)."""
    overrides = []
    for key in ("data", "models", "outputs"):
        (tmp_path / "mounts" / key).mkdir(parents=True, exist_ok=True)
        overrides.append(f"infra.mounts.{key}={tmp_path / 'mounts' / key}")
    return overrides


def _compose_calls(tmp_path: Path) -> list[dict]:
    """The ``docker compose ... run`` calls (the containers started)."""
    calls = read_calls(tmp_path / "docker-config")
    return [c for c in calls if c["argv"][:1] == ["compose"] and "run" in c["argv"]]


def _env(tmp_path: Path) -> dict[str, str]:
    """What the tests add to the environment: the fake docker first on PATH, its record dir,
    an NCCL variable to forward and a secret that must not reach the container."""
    bin_dir = install_fake_docker(tmp_path / "bin")
    docker_config = tmp_path / "docker-config"
    docker_config.mkdir(exist_ok=True)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "DOCKER_CONFIG": str(docker_config),
        "NCCL_DEBUG": "INFO",
        "HF_TOKEN": "hf_do_not_leak",
    }


def _train(
    args: list[str], cwd: Path, env: dict[str, str], in_process: bool = False
) -> subprocess.CompletedProcess:
    """``python train.py args`` with the fake docker: a real process, or (``in_process``, for
    the refusals before any container) ``main`` in this interpreter."""
    if in_process:
        return run_train_in_process(args, cwd, extra_env=env)
    return run_train(args, cwd, timeout=300, extra_env=env)


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_plugin_is_discovered_from_any_working_directory(tmp_path: Path) -> None:
    result = _train(["--info", "plugins"], tmp_path, _env(tmp_path))
    assert result.returncode == 0, result.stderr
    launchers = result.stdout.split("Launcher:")[1].split("Sweeper:")[0]
    assert "DockerLauncher" in launchers and "BasicLauncher" in launchers


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["hydra/launcher=docker", "infra=docker"], "add -m"),
        (["infra=docker"], "python train.py -m hydra/launcher=docker infra=docker"),
        (["-m", "hydra/launcher=docker"], "needs infra=docker"),
        # the device parse is unit-tested in tests/config/test_devices.py: in-process here
        (
            ["-m", "hydra/launcher=docker", "infra=docker", "infra.gpu.devices=[0,0]"],
            "duplicates",
        ),
        *[
            (
                ["-m", "hydra/launcher=docker", "infra=docker", f"infra.gpu.devices={value}"],
                needle,
            )
            for value, needle in (
                ("[-1]", "non-negative"),
                ("[]", "non-empty"),
                ("[a]", "integers"),
            )
        ],
        # infra.environment cannot reach the Docker CLI's own variables, nor the GPU selection
        # (unit-tested in tests/launcher/test_environment.py, and in-process by
        # tests/config/test_bad_values.py: in-process here)
        (
            ["-m", "hydra/launcher=docker", "infra=docker", "+infra.environment={PATH:/nowhere}"],
            "infra.environment.PATH cannot be set per job",
        ),
        (
            ["-m", "hydra/launcher=docker", "infra=docker", "+infra.environment.DOCKER_HOST=x"],
            "infra.environment.DOCKER_HOST cannot be set per job",
        ),
        (
            [
                "-m",
                "hydra/launcher=docker",
                "infra=docker",
                "+infra.environment.CUDA_VISIBLE_DEVICES=",
            ],
            "infra.environment.CUDA_VISIBLE_DEVICES cannot be set per job",
        ),
        # docker/preflight.py's check, unit-tested in tests/docker/test_preflight.py and run
        # against the real engine in tests/docker_e2e: in-process here
        (
            ["-m", "hydra/launcher=docker", "infra=docker", "infra.container.image=missing:latest"],
            "image missing:latest not found; build it with `make docker-build`",
        ),
        (
            ["-m", "hydra/launcher=docker", "infra=docker", "infra.mounts.models=/etc/hostname"],
            "infra.mounts.models: /etc/hostname is not a directory",
        ),
        # compose's bridge network publishes no rendezvous port: the nodes could never meet
        (
            [
                "-m",
                "hydra/launcher=docker",
                "infra=docker",
                "infra.nnodes=2",
                "infra.rdzv_endpoint=node0:29400",
            ],
            "infra.nnodes=2: multi-node Docker needs host networking",
        ),
    ],
)
def test_never_a_silent_host_run_and_bad_devices_fail_before_any_container(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    env = _env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    flags = [a for a in args if a == "-m"]
    overrides = [a for a in args if a != "-m"]  # last, so they win over the defaults here
    in_process = args != ["hydra/launcher=docker", "infra=docker"]
    result = _train([*flags, *_mounts(tmp_path), *QUICK, *overrides], work, env, in_process)
    assert result.returncode == 2, result.stdout + result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert _compose_calls(tmp_path) == []  # no container started
    assert list(work.iterdir()) == []  # nothing written


@pytest.mark.slow  # ~12 s: a real `train.py -m` multirun process (the fast suite's budget)
def test_multirun_through_the_cli_runs_each_job_via_docker_compose(tmp_path: Path) -> None:
    # the host's interface names (issue 32): not for the bridge-networked container
    env = _env(tmp_path) | {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0"}
    sweep = tmp_path / "sweep"
    result = _train(
        [
            "-m",
            "hydra/launcher=docker",
            "infra=docker",
            "infra.gpu.devices=[0,2]",
            "infra.nproc_per_node=1",  # one process per container (torchrun: test_environment)
            f"hydra.sweep.dir={sweep}",
            "ckpt.resume=null,/outputs/missing/step_1",  # visible there, but absent
            *_mounts(tmp_path),
            *QUICK,
        ],
        tmp_path,
        env,
        in_process=True,  # the launcher in this process; each container is a real train.py
    )
    # job 1 fails in its container; the launcher reports it and the multirun exits 2
    assert result.returncode == 2
    assert "job #1 failed (exit code 2)" in result.stderr
    assert "no checkpoint directory at /outputs/missing/step_1" in result.stderr
    assert "Traceback" not in result.stderr  # the exit code and log lines, not launcher code
    # one line says the host's interface names stay out (issue 32)
    said = [line for line in (result.stdout + result.stderr).splitlines() if "NCCL_IB_HCA" in line]
    assert len(said) == 1 and "NCCL_IB_HCA, NCCL_SOCKET_IFNAME from the host not passed" in said[0]
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert summary["step"] == 2 and summary["run_dir"] == str(sweep / "0")
    assert (sweep / "0" / "docker.log").is_file()

    calls = _compose_calls(tmp_path)
    assert len(calls) == 2
    for num, call in enumerate(calls):
        job = sweep / str(num)
        argv = call["argv"]
        assert argv[:7] == [
            "compose",
            "-f",
            str(REPO / "docker" / "compose.yaml"),
            "run",
            "--rm",
            "-T",
            "-e",
        ]
        assert ["--volume", f"{job}:{job}", "trainer"] == argv[argv.index("--volume") :][:3]
        assert argv[-1] == f"hydra.run.dir={job}"
        assert "--build" not in argv
        # a GPU job (device auto) must not fall back to the CPU in its container
        assert "infra.device=cuda" in argv[argv.index("trainer") :]
        assert {argv[i + 1] for i, a in enumerate(argv) if a == "-e"} == {
            "CUDA_VISIBLE_DEVICES",
            "NCCL_DEBUG",
        }
        # the launching user's label (make docker-stop stops only theirs: issue 32)
        assert f"astrai.user={os.getuid()}" == argv[argv.index("--label") + 1]
        seen = call["env"]
        assert seen["CUDA_VISIBLE_DEVICES"] == "0,2"
        assert seen["NCCL_DEBUG"] == "INFO"
        assert "NCCL_SOCKET_IFNAME" not in seen and "NCCL_IB_HCA" not in seen
        # the json-file log's bounds, conf/infra/docker.yaml's (issue 32)
        assert (seen["ASTRAI_LOG_MAX_SIZE"], seen["ASTRAI_LOG_MAX_FILE"]) == ("50m", "3")
        assert (seen["ASTRAI_UID"], seen["ASTRAI_GID"]) == (str(os.getuid()), str(os.getgid()))
        assert seen["ASTRAI_OUTPUTS_DIR"] == str(tmp_path / "mounts" / "outputs")
        assert "HF_TOKEN" not in seen and "OMP_NUM_THREADS" not in seen


@pytest.mark.slow  # ~20 s: three real train.py jobs through the fake docker
def test_narrowed_gpus_are_not_selected_again_in_the_container(tmp_path: Path) -> None:
    """Each job's GPUs reach its container as CUDA_VISIBLE_DEVICES, in order, and the container
    is told infra.gpu.devices=all (whoever narrows says "all"); an empty host value never
    reaches a job."""
    env = _env(tmp_path) | {"CUDA_VISIBLE_DEVICES": ""}
    sweep = tmp_path / "sweep"
    result = _train(
        [
            "-m",
            "hydra/launcher=docker",
            "infra=docker",
            "infra.gpu.devices=[1],[1,0],all",
            "infra.nproc_per_node=1",  # one process per container (torchrun: test_environment)
            "+infra.environment.MY_FLAG=on",
            f"hydra.sweep.dir={sweep}",
            *_mounts(tmp_path),
            *QUICK,
        ],
        tmp_path,
        env,
    )
    assert result.returncode == 0, result.stderr
    calls = _compose_calls(tmp_path)
    assert len(calls) == 3
    for num, (call, visible) in enumerate(zip(calls, ["1", "1,0", None], strict=True)):
        argv, seen = call["argv"], call["env"]
        assert seen.get("CUDA_VISIBLE_DEVICES") == visible
        forwarded = {argv[i + 1] for i, a in enumerate(argv) if a == "-e"}
        assert ("CUDA_VISIBLE_DEVICES" in forwarded) == (visible is not None)
        assert seen["MY_FLAG"] == "on" and "MY_FLAG" in forwarded
        service = argv.index("trainer")
        devices = [a for a in argv[service:] if a.startswith("infra.gpu.devices=")]
        assert devices == ["infra.gpu.devices=all"]
        job_config = (sweep / str(num) / ".hydra" / "config.yaml").read_text()
        assert "devices: all" in job_config  # what the container's train.py composed
        assert json.loads((sweep / str(num) / "summary.json").read_text())["step"] == 2


@pytest.mark.slow  # ~7 s: a preflight through the CLI; compose_duration's table is fast
def test_a_grace_period_compose_cannot_read_as_written_still_runs(tmp_path: Path) -> None:
    """``5M`` (any case, spaces) passes validation; Compose, which renders the compose file in
    the preflight (the fake runs the real Compose binary for it), reads Go durations only."""
    env = _env(tmp_path)
    args = ["-m", "hydra/launcher=docker", "infra=docker", "hydra.launcher.preflight_only=true"]
    grace = "infra.container.stop_grace_period=5M"
    result = _train([*args, *_mounts(tmp_path), *QUICK, grace], tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "preflight: ok (1 job(s))" in result.stdout
    calls = read_calls(tmp_path / "docker-config")
    renders = [c for c in calls if c["argv"][:1] == ["compose"] and "config" in c["argv"]]
    assert renders and all(c["env"]["ASTRAI_STOP_GRACE_PERIOD"] == "300s" for c in renders)


@pytest.mark.slow  # ~15 s: a two-job sweep through the fake docker, one job trains
@pytest.mark.skipif(torch.cuda.is_available(), reason="a container without a GPU, pretended")
def test_a_gpu_job_whose_container_sees_no_gpu_stops_instead_of_training_on_the_cpu(
    tmp_path: Path,
) -> None:
    """The default job (infra.device=auto, every GPU reserved) in a container that sees no GPU
    (a driver too old for the image's CUDA) fails with one line; a CPU job there runs."""
    env = _env(tmp_path)
    (tmp_path / "docker-config" / "no-gpu").touch()
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=docker", "infra=docker", f"hydra.sweep.dir={sweep}"]
    result = _train([*args, *_mounts(tmp_path), *QUICK, "infra.device=cpu,auto"], tmp_path, env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "job #1 failed (exit code 2)" in result.stderr
    assert "infra.device=cuda but no CUDA device is visible" in result.stderr
    assert json.loads((sweep / "0" / "summary.json").read_text())["step"] == 2
    assert not (sweep / "1" / "summary.json").exists()
    cpu, gpu = (call["argv"] for call in _compose_calls(tmp_path))
    assert "infra.device=cuda" not in cpu and "infra.device=cpu" in cpu
    assert "infra.device=cuda" in gpu and "infra.device=auto" not in gpu


@pytest.mark.slow  # ~25 s: three fake-docker jobs; the CLI multirun test stays in the fast suite
def test_launch_returns_each_jobs_summary_and_reports_the_failed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # an empty inherited value must not pass
    sweep = tmp_path / "sweep"
    register_configs()
    GlobalHydra.instance().clear()
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        hydra_overrides = ["hydra/launcher=docker", f"hydra.sweep.dir={sweep}"]
        # a sweeper hands each job all of its task overrides
        task = ["infra=docker", *_mounts(tmp_path), *QUICK]
        config = loader.load_configuration(
            "train", [*hydra_overrides, *task], run_mode=RunMode.MULTIRUN
        )
        HydraConfig.instance().set_config(config)
        context = HydraContext(config_loader=loader, callbacks=Callbacks(config))
        launcher = Plugins.instance().instantiate_launcher(
            hydra_context=context, task_function=lambda cfg: None, config=config
        )
        results = launcher.launch(
            [[*task, "seed=0"], [*task, "seed=1"], [*task, "ckpt.resume=/outputs/missing/step_1"]],
            initial_job_idx=0,
        )
    assert [r.status for r in results] == [
        JobStatus.COMPLETED,
        JobStatus.COMPLETED,
        JobStatus.FAILED,
    ]
    for num in (0, 1):
        summary = json.loads((sweep / str(num) / "summary.json").read_text())
        assert results[num].return_value == summary
        assert results[num].working_dir == str(sweep / str(num))
    assert results[0].return_value["step"] == 2
    with pytest.raises(DockerJobError, match=r"job #2 failed \(exit code 2\)"):
        results[2].return_value  # noqa: B018
    calls = _compose_calls(tmp_path)
    assert len(calls) == 3
    assert all("CUDA_VISIBLE_DEVICES" not in call["env"] for call in calls)
    assert all("CUDA_VISIBLE_DEVICES" not in call["argv"] for call in calls)


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["hydra.launcher.detach=true"], {}, "hydra.launcher.detach=true needs"),
        # unit-tested in test_environment.py / tests/config/test_devices.py: in-process here
        (
            ["hydra.launcher.job_name=../up"],
            {},
            "hydra.launcher.job_name='../up': use 1-63",
        ),
        (
            ["infra.gpu.devices=none", "infra.device=cuda"],
            {},
            "infra.gpu.devices=none selects",
        ),
        # a detached sweep starts every container at once: GPU jobs must not share GPUs
        # (the default, infra.gpu.devices=all, overlaps everything); CPU jobs share nothing
        (
            ["hydra.launcher.job_name=sw", "hydra.launcher.detach=true", "seed=0,1"],
            {},
            "jobs #0 and #1 share GPUs (infra.gpu.devices=all and all)",
        ),
        (  # the overlap rule itself: test_environment.py (no sweep there)
            [
                "hydra.launcher.job_name=sw",
                "hydra.launcher.detach=true",
                "infra.gpu.devices=[0],[1],[2,1]",
            ],
            {},
            "jobs #1 and #2 share GPUs (infra.gpu.devices=[1] and [2, 1])",
        ),
        # the engine down: that cause, not a missing image; the mounts are made on the way
        ([], {"engine": "down"}, "docker error: Docker engine not reachable"),
        ([], {"ASTRAI_UID": "me"}, "ASTRAI_UID must be a number"),
        # the json-file log's bound needs a unit (issue 32; the rule: test_environment.py)
        (
            ["infra.container.log_max_size=50"],
            {},
            "config error: infra.container.log_max_size='50': a size with a unit",
        ),
    ],
)
def test_host_and_name_errors_are_one_line_before_any_container(
    tmp_path: Path, args: list[str], env: dict[str, str], needle: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    mounts = [f"infra.mounts.{k}={tmp_path / 'new' / k}" for k in ("data", "models", "outputs")]
    launch = ["-m", "hydra/launcher=docker", "infra=docker", *mounts, *QUICK, *args]
    env = dict(env)
    engine_down = env.pop("engine", None) == "down"
    if engine_down:
        (tmp_path / "docker-config").mkdir()
        (tmp_path / "docker-config" / "engine-down").touch()
    # in-process: the real process of this family is the first row of the test above
    result = _train(launch, work, _env(tmp_path) | env, in_process=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert _compose_calls(tmp_path) == []
    assert list(work.iterdir()) == []  # no sweep dir left behind
    if engine_down:
        assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["data", "models", "outputs"]
        for key in ("data", "models"):
            assert f"infra.mounts.{key}: created the empty folder {tmp_path / 'new' / key}" in (
                result.stdout + result.stderr
            )


@pytest.mark.slow  # ~20 s: a named CPU job through the fake docker, run twice
def test_a_named_cpu_job_has_a_stable_run_dir_and_resumes(tmp_path: Path) -> None:
    env = _env(tmp_path)
    outputs = tmp_path / "mounts" / "outputs"
    args = [
        "-m",
        "hydra/launcher=docker",
        "infra=docker",
        "infra.gpu.devices=none",
        "hydra.launcher.job_name=exp1",
        *_mounts(tmp_path),
        *QUICK,
    ]
    first = _train([*args, "trainer.total_steps=1"], tmp_path, env)
    assert first.returncode == 0, first.stderr
    again = _train([*args, "trainer.total_steps=2"], tmp_path, env)  # the same job, 1 more step
    assert again.returncode == 0, again.stderr
    run_dir = outputs / "exp1"
    assert json.loads((run_dir / "summary.json").read_text())["step"] == 2
    assert "resumed from" in (run_dir / "train.log").read_text()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    container = f"astrai-{launching_user()[1]}-exp1"  # the user's own: issue 32
    assert json.loads((run_dir / "docker-job.json").read_text())["container"] == container
    assert not (tmp_path / "multirun").exists()  # Hydra's timestamped sweep dir is not left
    calls = _compose_calls(tmp_path)
    assert len(calls) == 2
    for call in calls:
        argv = call["argv"]
        cpu_file = str(REPO / "docker" / "compose.cpu.yaml")
        assert argv[1:6] == ["-f", str(REPO / "docker" / "compose.yaml"), "-f", cpu_file, "run"]
        assert argv[6:8] == ["--name", container] and "--rm" not in argv
        assert "astrai.job=exp1" in argv and f"astrai.run_dir={run_dir}" in argv
        assert argv[-1] == f"hydra.run.dir={run_dir}"
    # before each start the launcher looked for a container of that name (to refuse a running
    # one and remove a finished one)
    ps = [c["argv"] for c in read_calls(tmp_path / "docker-config") if c["argv"][:1] == ["ps"]]
    assert ps == [["ps", "-a", "--filter", f"name=^/{container}$", "--format", "{{.State}}"]] * 2


@pytest.mark.slow  # ~20 s: a named 2-job sweep through the fake docker
def test_a_named_sweep_puts_its_jobs_under_the_name(tmp_path: Path) -> None:
    env = _env(tmp_path)
    outputs = tmp_path / "mounts" / "outputs"
    args = ["-m", "hydra/launcher=docker", "infra=docker", "infra.gpu.devices=none"]
    args += [*_mounts(tmp_path), *QUICK, "trainer.total_steps=1"]
    result = _train([*args, "hydra.launcher.job_name=sw", "seed=0,1"], tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert (outputs / "sw" / "multirun.yaml").is_file()
    for num in (0, 1):
        summary = json.loads((outputs / "sw" / str(num) / "summary.json").read_text())
        assert summary["run_dir"] == str(outputs / "sw" / str(num))
    names = [c["argv"][c["argv"].index("--name") + 1] for c in _compose_calls(tmp_path)]
    user = launching_user()[1]
    assert names == [f"astrai-{user}-sw-0", f"astrai-{user}-sw-1"]
    # a name holds one kind: this sweep's name for a single run is refused, and the reverse
    single = _train([*args, "hydra.launcher.job_name=sw"], tmp_path, env)
    assert single.returncode == 2 and "holds a sweep, not a single run" in single.stderr
    (outputs / "one" / ".hydra").mkdir(parents=True)
    sweep = _train([*args, "hydra.launcher.job_name=one", "seed=0,1"], tmp_path, env)
    assert sweep.returncode == 2 and "holds a single run, not a sweep" in sweep.stderr
    assert len(_compose_calls(tmp_path)) == 2  # no container for the refused ones


@pytest.mark.slow  # ~15 s: two detached fake-docker jobs, waited for
def test_a_detached_sweep_of_gpu_jobs_on_their_own_gpus_starts_them_all(tmp_path: Path) -> None:
    env = _env(tmp_path)
    outputs = tmp_path / "mounts" / "outputs"
    args = ["-m", "hydra/launcher=docker", "infra=docker", *_mounts(tmp_path), *QUICK]
    args += ["hydra.launcher.job_name=sw", "hydra.launcher.detach=true"]
    # a CPU job beside them shares no GPU either
    result = _train([*args, "infra.gpu.devices=[0],[1],none"], tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = _compose_calls(tmp_path)
    assert [call["env"].get("CUDA_VISIBLE_DEVICES") for call in calls] == ["0", "1", None]
    assert all("-d" in call["argv"] for call in calls)
    for num in range(3):  # the background jobs end before the test does
        wait_for_file(outputs / "sw" / str(num) / "summary.json", timeout=120)


@pytest.mark.slow  # a 2-job Docker sweep stopped mid-job: ~15 s
def test_sigterm_stops_a_docker_sweep_after_the_running_job_checkpoints(tmp_path: Path) -> None:
    """The signal reaches job 0's container (through compose, which the fake plays), which
    checkpoints and exits 0; job 1 never starts; the launcher exits 0."""
    sweep = tmp_path / "sweep"
    env = {**os.environ, **_env(tmp_path), "OMP_NUM_THREADS": "1"}
    args = ["-m", "hydra/launcher=docker", "infra=docker", "infra.gpu.devices=none", "seed=0,1"]
    args += [*_mounts(tmp_path), *QUICK, "trainer.total_steps=100000"]  # only the signal ends it
    args.append(f"hydra.sweep.dir={sweep}")
    process = subprocess.Popen(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_rows(process, sweep / "0" / "metrics.jsonl")
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, output[-3000:]
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert summary["stopped"] == "SIGTERM" and summary["checkpoint"] is not None
    assert len(_compose_calls(tmp_path)) == 1 and not (sweep / "1").exists()
    assert "sweep stopped after job 0 (SIGTERM)" in output


def wait_for_file(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.is_file():
        assert time.monotonic() < deadline, f"no {path} after {timeout} s"
        time.sleep(0.2)


def _fake_job(tmp_path: Path) -> tuple[SimpleNamespace, Job]:
    config = OmegaConf.create({"seed": 0, "hydra": {"job": {"name": "train"}}})
    launcher = SimpleNamespace(detach=False, job_name=None)
    return launcher, Job(3, ["seed=0"], config, {}, tmp_path / "3", None)


@pytest.mark.parametrize(
    ("exit_code", "summary", "reason"),
    [
        (2, None, "exit code 2"),
        (137, None, "exit code 137"),
        (0, None, "exit code 0 but no summary.json in"),
        (0, "[1, 2", "exit code 0 but {job}/summary.json is unreadable"),
    ],
)
def test_a_failed_job_reports_its_exit_code_and_log_lines_without_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    exit_code: int,
    summary: str | None,
    reason: str,
) -> None:
    launcher, job = _fake_job(tmp_path)
    job.job_dir.mkdir()
    if summary is not None:
        (job.job_dir / "summary.json").write_text(summary)
    tail = ["step 1 ...", "astrai: reward error: boom"]
    monkeypatch.setattr(_core, "_start_job", lambda *args: (exit_code, tail))
    result = _core._run_job(launcher, job, [], tmp_path)  # type: ignore[arg-type]
    assert result.status == JobStatus.FAILED
    # what Hydra's sweep does with the result: read it, and report what it raises
    with pytest.raises(SystemExit) as exit_:
        run_and_report(lambda: result.return_value)
    assert exit_.value.code == 2
    err = capsys.readouterr().err  # the report, printed when the job ended, then Hydra's line
    assert "Traceback" not in err and 'File "' not in err
    lines = err.splitlines()  # Hydra's "Error executing job with overrides: ..." first
    first = next(line for line in lines if line.startswith("astrai: docker job #3 failed ("))
    assert reason.format(job=job.job_dir) in first and first.endswith("last log lines:")
    assert "    step 1 ...\n    astrai: reward error: boom" in err


def test_a_job_whose_run_dir_cannot_be_written_fails_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher, job = _fake_job(tmp_path)

    def no_space(*args: object) -> tuple[int, list[str]]:
        raise OSError(errno.ENOSPC, "No space left on device", str(job.job_dir / "docker.log"))

    monkeypatch.setattr(_core, "_start_job", no_space)
    result = _core._run_job(launcher, job, [], tmp_path)  # type: ignore[arg-type]
    assert result.status == JobStatus.FAILED
    with pytest.raises(DockerJobError, match="docker.log: No space left on device"):
        result.return_value  # noqa: B018
