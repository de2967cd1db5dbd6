"""The pure functions behind each job's ``docker compose run``: environment and argv."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra_plugins.astrai_docker_launcher._environment import (
    compose_argv,
    compose_duration,
    compose_environment,
    compose_files,
    container_name,
    container_overrides,
    container_plan,
    container_user,
    forwarded_names,
    job_name_error,
    log_options_error,
    named_job_dir,
    needs_gpus,
    shared_gpus,
    unforwarded_host_variables,
    user_tag,
)

REPO = Path("/repo")
HOST = {
    "PATH": "/usr/bin",
    "HOME": "/home/u",
    "DOCKER_HOST": "unix:///run/docker.sock",
    "NCCL_DEBUG": "INFO",
    "NCCL_SOCKET_IFNAME": "eth0",
    "HF_TOKEN": "hf_secret",
    "AWS_SECRET_ACCESS_KEY": "aws_secret",
    "CUDA_VISIBLE_DEVICES": "",
    "LD_PRELOAD": "/evil.so",
}


def _infra(devices: object = "all", environment: dict | None = None, **mounts: str) -> dict:
    return {
        "device": "auto",
        "nproc_per_node": "auto",
        "gpu": {"devices": devices},
        "container": {
            "image": "astrai:latest",
            "shm_size": "16gb",
            "ipc": "host",
            "stop_grace_period": "300s",
            "log_max_size": "50m",
            "log_max_file": 3,
        },
        "mounts": {"data": "data", "models": "/mnt/models", "outputs": "outputs", **mounts},
        "environment": environment or {},
    }


def test_all_devices_leaves_cuda_visible_devices_unset() -> None:
    env = compose_environment(_infra("all"), HOST, 1000, 1000, REPO)
    assert "CUDA_VISIBLE_DEVICES" not in env  # the inherited empty value is stripped too
    env = compose_environment(_infra("all"), {**HOST, "CUDA_VISIBLE_DEVICES": "3"}, 1, 1, REPO)
    assert "CUDA_VISIBLE_DEVICES" not in env  # infra.gpu.devices is the one selector


@pytest.mark.parametrize(("devices", "value"), [([0, 2], "0,2"), ([1, 0], "1,0"), ([3], "3")])
def test_a_device_list_becomes_a_comma_separated_value(devices: list[int], value: str) -> None:
    env = compose_environment(_infra(devices), HOST, 1000, 1000, REPO)
    assert env["CUDA_VISIBLE_DEVICES"] == value  # in order: the container's GPU 0 comes first
    env = compose_environment(_infra(devices), {**HOST, "CUDA_VISIBLE_DEVICES": "7"}, 1, 1, REPO)
    assert env["CUDA_VISIBLE_DEVICES"] == value  # the host's value never counts


def test_a_cpu_job_selects_no_gpu() -> None:
    infra = _infra([1, 0]) | {"device": "cpu"}
    assert "CUDA_VISIBLE_DEVICES" not in compose_environment(infra, HOST, 1, 1, REPO)
    assert container_plan(infra).processes == 1


def test_uid_gid_and_container_settings() -> None:
    env = compose_environment(_infra(), HOST, 1234, 5678, REPO)
    assert (env["ASTRAI_UID"], env["ASTRAI_GID"]) == ("1234", "5678")
    assert env["ASTRAI_IMAGE"] == "astrai:latest"
    assert (env["ASTRAI_SHM_SIZE"], env["ASTRAI_IPC"]) == ("16gb", "host")
    assert env["ASTRAI_STOP_GRACE_PERIOD"] == "300s"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("300s", "300s"), ("5M", "300s"), ("2 m", "120s"), ("1h30m", "5400s"), (600, "600s")],
)
def test_the_grace_period_reaches_compose_with_a_unit(value: object, expected: str) -> None:
    # Compose reads Go durations: "600" (no unit), "5M" and "2 m" fail to render there
    infra = _infra()
    infra["container"] = infra["container"] | {"stop_grace_period": value}
    env = compose_environment(infra, HOST, 1, 1, REPO)
    assert env["ASTRAI_STOP_GRACE_PERIOD"] == expected
    assert compose_duration(1.5) == "1.5s" and compose_duration(2e6) == "2000000s"


def test_mounts_resolve_relative_paths_against_the_repo_root() -> None:
    env = compose_environment(_infra(), HOST, 1, 1, REPO)
    assert env["ASTRAI_DATA_DIR"] == "/repo/data"
    assert env["ASTRAI_MODELS_DIR"] == "/mnt/models"
    assert env["ASTRAI_OUTPUTS_DIR"] == "/repo/outputs"


def test_only_nccl_and_docker_cli_variables_come_from_the_host() -> None:
    env = compose_environment(_infra(), HOST, 1, 1, REPO)
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["PATH"] == "/usr/bin" and env["DOCKER_HOST"] == "unix:///run/docker.sock"
    for secret in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "LD_PRELOAD"):
        assert secret not in env
    assert set(env) == {
        "PATH",
        "HOME",
        "DOCKER_HOST",
        "NCCL_DEBUG",
        "ASTRAI_UID",
        "ASTRAI_GID",
        "ASTRAI_IMAGE",
        "ASTRAI_SHM_SIZE",
        "ASTRAI_IPC",
        "ASTRAI_STOP_GRACE_PERIOD",
        "ASTRAI_LOG_MAX_SIZE",
        "ASTRAI_LOG_MAX_FILE",
        "ASTRAI_DATA_DIR",
        "ASTRAI_MODELS_DIR",
        "ASTRAI_OUTPUTS_DIR",
        "COMPOSE_IGNORE_ORPHANS",  # named jobs' kept containers
    }


def test_infra_environment_is_forwarded_and_wins_over_the_host() -> None:
    infra = _infra([1], {"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": "1", "MY_FLAG": "x"})
    env = compose_environment(infra, HOST, 1, 1, REPO)
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["NCCL_P2P_DISABLE"] == "1" and env["MY_FLAG"] == "x"
    assert forwarded_names(env, infra) == [
        "CUDA_VISIBLE_DEVICES",
        "MY_FLAG",
        "NCCL_DEBUG",
        "NCCL_P2P_DISABLE",
    ]


def test_launcher_owned_variables_win_over_infra_environment() -> None:
    # validate_config refuses these names in infra.environment; should one get through, the
    # Docker CLI still runs with the host's PATH and the launcher's ASTRAI_* and GPU selection
    hostile = {"PATH": "/evil", "DOCKER_HOST": "tcp://evil:2375", "ASTRAI_IMAGE": "evil:1"}
    env = compose_environment(_infra([1], hostile | {"CUDA_VISIBLE_DEVICES": ""}), HOST, 1, 1, REPO)
    assert env["PATH"] == "/usr/bin" and env["DOCKER_HOST"] == "unix:///run/docker.sock"
    assert env["ASTRAI_IMAGE"] == "astrai:latest"
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    env = compose_environment(_infra("all", {"CUDA_VISIBLE_DEVICES": ""}), HOST, 1, 1, REPO)
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_reserved_names_in_infra_environment_never_reach_docker_or_the_container() -> None:
    # issue 21: a launcher-owned or Docker CLI name the host does not set (DOCKER_HOST here)
    # must not come from infra.environment either, nor be forwarded with -e
    host = {k: v for k, v in HOST.items() if k != "DOCKER_HOST"}
    hostile = {
        "DOCKER_HOST": "tcp://evil:2375",
        "COMPOSE_FILE": "/evil.yaml",
        "ASTRAI_UID": "0",
        "ASTRAI_GID": "0",
        "PATH": "/evil",
        "CUDA_VISIBLE_DEVICES": "",
        "LD_PRELOAD": "/evil.so",
        "MY_FLAG": "x",
    }
    infra = _infra([1], hostile)
    env = compose_environment(infra, host, 1000, 1001, REPO)
    assert "DOCKER_HOST" not in env and "COMPOSE_FILE" not in env and "LD_PRELOAD" not in env
    assert (env["ASTRAI_UID"], env["ASTRAI_GID"]) == ("1000", "1001")
    assert env["PATH"] == "/usr/bin" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["MY_FLAG"] == "x"
    assert forwarded_names(env, infra) == ["CUDA_VISIBLE_DEVICES", "MY_FLAG", "NCCL_DEBUG"]


def test_the_container_is_told_all_when_its_gpus_are_narrowed() -> None:
    overrides = ["seed=1", "infra.gpu.devices=[1,0]", "+infra.environment.X=1"]
    plan = container_plan(_infra([1, 0]))
    assert (plan.cuda_visible_devices, plan.gpu_devices) == ("1,0", "all")
    assert container_overrides(overrides, plan) == [
        "seed=1",
        "+infra.environment.X=1",
        "infra.gpu.devices=all",
        "infra.device=cuda",
    ]
    # nothing narrowed (all GPUs, or a CPU job): the overrides go in as given, but for the
    # GPU job's device (test_a_gpu_job_is_told_cuda_so_a_container_without_one_stops)
    assert container_overrides(overrides, container_plan(_infra("all"))) == [
        *overrides,
        "infra.device=cuda",
    ]
    cpu = container_plan(_infra([1, 0]) | {"device": "cpu"})
    assert container_overrides(overrides, cpu) == overrides


@pytest.mark.parametrize(
    ("infra", "overrides", "expected"),
    [
        # the default (auto, all GPUs reserved): a container that sees no GPU must not train on
        # the CPU unnoticed; an explicit auto is replaced, not passed twice
        ({}, ["seed=1"], ["seed=1", "infra.device=cuda"]),
        ({}, ["infra.device=auto", "seed=1"], ["seed=1", "infra.device=cuda"]),
        (
            {"gpu": {"devices": [2]}},
            ["infra.gpu.devices=[2]"],
            ["infra.gpu.devices=all", "infra.device=cuda"],
        ),
        # cuda already; CPU jobs (no reservation) are never told cuda
        ({"device": "cuda"}, ["infra.device=cuda"], ["infra.device=cuda"]),
        ({"device": "cpu"}, ["infra.device=cpu"], ["infra.device=cpu"]),
        ({"gpu": {"devices": "none"}}, ["infra.gpu.devices=none"], ["infra.gpu.devices=none"]),
    ],
)
def test_a_gpu_job_is_told_cuda_so_a_container_without_one_stops(
    infra: dict, overrides: list[str], expected: list[str]
) -> None:
    assert container_overrides(overrides, container_plan(_infra() | infra)) == expected


def test_compose_argv_is_a_list_with_the_job_dir_mounted_and_never_build() -> None:
    job = Path("/repo/multirun/2026-11-30/10-00-00/3")
    argv = compose_argv(
        "docker",
        [Path("/repo/docker/compose.yaml")],
        "trainer",
        ["CUDA_VISIBLE_DEVICES", "NCCL_DEBUG"],
        job,
        ["train_type=online_ppo", "train_type.ppo_gamma=0.95", "hydra.run.dir=/elsewhere"],
        user_id=1000,
    )
    assert argv == [
        "docker",
        "compose",
        "-f",
        "/repo/docker/compose.yaml",
        "run",
        "--rm",
        "-T",
        "-e",
        "CUDA_VISIBLE_DEVICES",
        "-e",
        "NCCL_DEBUG",
        "--label",
        "astrai.user=1000",
        "--label",
        f"astrai.run_dir={job}",
        "--volume",
        f"{job}:{job}",
        "trainer",
        "train_type=online_ppo",
        "train_type.ppo_gamma=0.95",
        f"hydra.run.dir={job}",
    ]
    assert "--build" not in argv


def test_a_multi_gpu_job_runs_train_py_which_starts_its_workers() -> None:
    # no torchrun in the container: train.py's own launch forwards docker stop's SIGTERM to its
    # workers and exits 0; the narrowed GPUs and `all` make its `auto` count 2 processes
    job = Path("/repo/multirun/x/0")
    plan = container_plan(_infra([0, 1]))
    assert plan.processes == 2 and plan.cuda_visible_devices == "0,1"
    overrides = container_overrides(["seed=1", "infra.gpu.devices=[0,1]"], plan)
    argv = compose_argv(
        "docker", [Path("/repo/docker/compose.yaml")], "trainer", [], job, overrides, user_id=0
    )
    assert "--entrypoint" not in argv and "torchrun" not in argv
    assert argv[argv.index("trainer") + 1 :] == [
        "seed=1",
        "infra.gpu.devices=all",
        "infra.device=cuda",
        f"hydra.run.dir={job}",
    ]


def test_container_processes() -> None:
    assert container_plan(_infra("all")).processes is None  # the container counts its GPUs
    assert container_plan(_infra([3])).processes == 1
    assert container_plan(_infra("all") | {"nproc_per_node": 4}).processes == 4


def test_a_named_detached_cpu_job() -> None:
    # a named job keeps its container (no --rm) under its own name and labels it; -d detaches;
    # a CPU job adds the compose file that drops the GPU reservation
    job = Path("/srv/outputs/exp1")
    files = compose_files(
        Path("/repo/c.yaml"), Path("/repo/cpu.yaml"), container_plan(_infra("none"))
    )
    assert files == [Path("/repo/c.yaml"), Path("/repo/cpu.yaml")]
    argv = compose_argv(
        "docker",
        files,
        "trainer",
        [],
        job,
        ["seed=1"],
        user_id=1000,
        job_name="exp1",
        container="astrai-alice-exp1",
        detach=True,
    )
    assert argv == [
        "docker", "compose", "-f", "/repo/c.yaml", "-f", "/repo/cpu.yaml",
        "run", "--name", "astrai-alice-exp1", "-d", "-T", "--label", "astrai.user=1000",
        "--label", f"astrai.run_dir={job}", "--label", "astrai.job=exp1",
        "--volume", f"{job}:{job}", "trainer", "seed=1", f"hydra.run.dir={job}",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("infra", "gpus"),
    [
        ({}, True),  # the default: auto, all GPUs -> reserved; the container decides
        ({"gpu": {"devices": [1]}}, True),
        ({"device": "cuda"}, True),
        ({"gpu": {"devices": "none"}}, False),
        ({"device": "cpu"}, False),
        ({"device": "cpu", "gpu": {"devices": [0, 1]}}, False),
    ],
)
def test_gpu_reservation_only_when_a_gpu_may_be_used(infra: dict, gpus: bool) -> None:
    plan = container_plan(_infra() | infra)
    assert needs_gpus(plan) is gpus
    files = compose_files(Path("/c.yaml"), Path("/cpu.yaml"), plan)
    assert files == ([Path("/c.yaml")] if gpus else [Path("/c.yaml"), Path("/cpu.yaml")])
    env = compose_environment(_infra() | infra, HOST, 1000, 1000, REPO)
    assert ("CUDA_VISIBLE_DEVICES" in env) == (infra.get("gpu", {}).get("devices") == [1])


def test_container_user_and_job_names() -> None:
    assert container_user({}, 1000, 1001) == (1000, 1001)
    assert container_user({"ASTRAI_UID": "2000", "ASTRAI_GID": "0"}, 1000, 1001) == (2000, 0)
    with pytest.raises(ValueError, match="ASTRAI_GID must be a number"):
        container_user({"ASTRAI_GID": "staff"}, 0, 0)
    assert job_name_error("exp1") is None and job_name_error("ppo_gamma-0.99") is not None
    for bad in ("", "../x", "a/b", "-x", "x" * 64, "ünï"):
        assert "hydra.launcher.job_name" in str(job_name_error(bad)), bad
    outputs = Path("/srv/outputs")
    assert named_job_dir(outputs, "exp1", 0, sweep=False) == outputs / "exp1"
    assert named_job_dir(outputs, "exp1", 3, sweep=True) == outputs / "exp1" / "3"
    assert container_name("alice", "exp1", 0, sweep=False) == "astrai-alice-exp1"
    assert container_name("alice", "exp1", 3, sweep=True) == "astrai-alice-exp1-3"


@pytest.mark.parametrize(
    ("selections", "pair"),
    [
        (["all", "all"], (0, 1)),  # the default overlaps everything
        ([[0], [1], [2, 1]], (1, 2)),
        ([[0], [1], [2]], None),
        ([[0], "none", "none", [1]], None),  # CPU jobs reserve no GPU
        (["none", "all"], None),
        ([[0, 1], "all"], (0, 1)),
    ],
)
def test_which_detached_gpu_jobs_share_a_gpu(selections: list, pair: tuple | None) -> None:
    assert shared_gpus([container_plan(_infra(devices)) for devices in selections]) == pair


# --- issue 32: a shared or multi-GPU engine ----------------------------------------------------


def test_host_interface_names_never_reach_the_bridge_networked_container() -> None:
    """NCCL_SOCKET_IFNAME / NCCL_IB_HCA name the host's interfaces (ib0, mlx5_0), which the
    container on compose's bridge network lacks: not forwarded from the host; other NCCL_*
    still are; infra.environment may set them for the container, and then they pass."""
    host = {**HOST, "NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0", "NCCL_P2P_LEVEL": "NVL"}
    env = compose_environment(_infra(), host, 1, 1, REPO)
    assert "NCCL_SOCKET_IFNAME" not in env and "NCCL_IB_HCA" not in env
    assert (env["NCCL_DEBUG"], env["NCCL_P2P_LEVEL"]) == ("INFO", "NVL")
    assert forwarded_names(env, _infra()) == ["NCCL_DEBUG", "NCCL_P2P_LEVEL"]
    assert unforwarded_host_variables(_infra(), host) == ["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"]
    own = _infra(environment={"NCCL_SOCKET_IFNAME": "eth0"})
    env = compose_environment(own, host, 1, 1, REPO)
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and "NCCL_IB_HCA" not in env
    assert "NCCL_SOCKET_IFNAME" in forwarded_names(env, own)
    assert unforwarded_host_variables(own, host) == ["NCCL_IB_HCA"]
    assert unforwarded_host_variables(_infra(), {"NCCL_DEBUG": "INFO"}) == []


def test_named_containers_and_labels_are_the_launching_users() -> None:
    # two users' job "exp1" on one engine: two containers, each labelled with its user's uid
    assert container_name(user_tag(1000, "alice"), "exp1", 0, sweep=False) == "astrai-alice-exp1"
    assert container_name(user_tag(1001, "bob"), "exp1", 0, sweep=False) == "astrai-bob-exp1"
    # a login Docker would refuse in a name, or none (a uid without a passwd entry): u<uid>
    assert user_tag(1002, "jean dupont") == "u1002" and user_tag(1003, None) == "u1003"
    assert user_tag(0, "root") == "root"
    argv = compose_argv("docker", [Path("/c.yaml")], "trainer", [], Path("/j"), [], user_id=1001)
    assert argv[argv.index("--label") : argv.index("--label") + 2] == [
        "--label",
        "astrai.user=1001",
    ]


def test_log_bounds_reach_compose_and_bad_ones_are_refused() -> None:
    infra = _infra()
    infra["container"] |= {"log_max_size": "10m", "log_max_file": 5}
    env = compose_environment(infra, HOST, 1, 1, REPO)
    assert (env["ASTRAI_LOG_MAX_SIZE"], env["ASTRAI_LOG_MAX_FILE"]) == ("10m", "5")
    assert log_options_error(infra["container"]) is None
    for key, bad in (
        ("log_max_size", "50"),  # no unit
        ("log_max_size", "50 mb"),
        ("log_max_size", "0m"),
        ("log_max_size", None),  # infra=local's null: unbounded is not an option
        ("log_max_file", 0),
        ("log_max_file", True),
        ("log_max_file", None),
    ):
        error = log_options_error(infra["container"] | {key: bad})
        assert error is not None and error.startswith(f"infra.container.{key}={bad!r}: "), key
