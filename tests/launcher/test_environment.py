"""The pure functions behind each job's ``docker compose run``: environment and argv."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra_plugins.astrai_docker_launcher._environment import (
    compose_argv,
    compose_environment,
    container_processes,
    cuda_visible_devices,
    forwarded_names,
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
        "gpu": {"devices": devices},
        "container": {
            "image": "astrai:latest",
            "shm_size": "16gb",
            "ipc": "host",
            "stop_grace_period": "300s",
        },
        "mounts": {"data": "data", "models": "/mnt/models", "outputs": "outputs", **mounts},
        "environment": environment or {},
    }


def test_all_devices_leaves_cuda_visible_devices_unset() -> None:
    env = compose_environment(_infra("all"), HOST, 1000, 1000, REPO)
    assert "CUDA_VISIBLE_DEVICES" not in env  # the inherited empty value is stripped too
    env = compose_environment(_infra("all"), {**HOST, "CUDA_VISIBLE_DEVICES": "3"}, 1, 1, REPO)
    assert "CUDA_VISIBLE_DEVICES" not in env  # infra.gpu.devices is the one selector


def test_a_device_list_becomes_a_comma_separated_value() -> None:
    env = compose_environment(_infra([0, 2]), HOST, 1000, 1000, REPO)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,2"
    assert cuda_visible_devices([3]) == "3"
    with pytest.raises(ValueError):
        cuda_visible_devices([])


def test_uid_gid_and_container_settings() -> None:
    env = compose_environment(_infra(), HOST, 1234, 5678, REPO)
    assert (env["ASTRAI_UID"], env["ASTRAI_GID"]) == ("1234", "5678")
    assert env["ASTRAI_IMAGE"] == "astrai:latest"
    assert (env["ASTRAI_SHM_SIZE"], env["ASTRAI_IPC"]) == ("16gb", "host")
    assert env["ASTRAI_STOP_GRACE_PERIOD"] == "300s"


def test_mounts_resolve_relative_paths_against_the_repo_root() -> None:
    env = compose_environment(_infra(), HOST, 1, 1, REPO)
    assert env["ASTRAI_DATA_DIR"] == "/repo/data"
    assert env["ASTRAI_MODELS_DIR"] == "/mnt/models"
    assert env["ASTRAI_OUTPUTS_DIR"] == "/repo/outputs"


def test_only_nccl_and_docker_cli_variables_come_from_the_host() -> None:
    env = compose_environment(_infra(), HOST, 1, 1, REPO)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert env["PATH"] == "/usr/bin" and env["DOCKER_HOST"] == "unix:///run/docker.sock"
    for secret in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "LD_PRELOAD"):
        assert secret not in env
    assert set(env) == {
        "PATH",
        "HOME",
        "DOCKER_HOST",
        "NCCL_DEBUG",
        "NCCL_SOCKET_IFNAME",
        "ASTRAI_UID",
        "ASTRAI_GID",
        "ASTRAI_IMAGE",
        "ASTRAI_SHM_SIZE",
        "ASTRAI_IPC",
        "ASTRAI_STOP_GRACE_PERIOD",
        "ASTRAI_DATA_DIR",
        "ASTRAI_MODELS_DIR",
        "ASTRAI_OUTPUTS_DIR",
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
        "NCCL_SOCKET_IFNAME",
    ]


def test_compose_argv_is_a_list_with_the_job_dir_mounted_and_never_build() -> None:
    job = Path("/repo/multirun/2026-11-30/10-00-00/3")
    argv = compose_argv(
        "docker",
        Path("/repo/docker/compose.yaml"),
        "trainer",
        ["CUDA_VISIBLE_DEVICES", "NCCL_DEBUG"],
        job,
        ["train_type=online_ppo", "train_type.ppo_gamma=0.95", "hydra.run.dir=/elsewhere"],
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
        "--volume",
        f"{job}:{job}",
        "trainer",
        "train_type=online_ppo",
        "train_type.ppo_gamma=0.95",
        f"hydra.run.dir={job}",
    ]
    assert "--build" not in argv


def test_a_multi_gpu_job_runs_torchrun_in_the_container() -> None:
    job = Path("/repo/multirun/x/0")
    processes = container_processes(_infra([0, 1]) | {"nproc_per_node": "auto"})
    assert processes == 2
    argv = compose_argv(
        "docker", Path("/repo/docker/compose.yaml"), "trainer", [], job, ["seed=1"], processes
    )
    service = argv.index("trainer")
    assert argv[argv.index("--entrypoint") + 1] == "torchrun"
    # the in-container command: torchrun --standalone --nproc_per_node=2 train.py overrides
    assert argv[service + 1 :] == [
        "--standalone",
        "--nproc_per_node=2",
        "/workspace/train.py",
        "seed=1",
        f"hydra.run.dir={job}",
    ]


def test_container_processes() -> None:
    assert container_processes(_infra("all") | {"nproc_per_node": "auto"}) is None
    assert container_processes(_infra([3]) | {"nproc_per_node": "auto"}) == 1
    assert container_processes(_infra("all") | {"nproc_per_node": 4}) == 4
    single = compose_argv("docker", Path("/c.yaml"), "trainer", [], Path("/j"), [], 1)
    assert "--entrypoint" not in single and "torchrun" not in single
