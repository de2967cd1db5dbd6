"""What a job's ``docker compose run`` sees: its environment and its argv. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# What the Docker CLI itself needs to reach the engine; none of it is passed into the container
# (compose only passes the names compose.yaml lists and the -e flags below).
DOCKER_CLI_VARIABLES = (
    "PATH",
    "HOME",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "XDG_RUNTIME_DIR",
)
FORWARDED_PREFIX = "NCCL_"


def cuda_visible_devices(devices: Any) -> str | None:
    """``"all"`` -> None (leave the variable unset: every reserved GPU is visible);
    ``[0, 2]`` -> ``"0,2"``. Never the empty string, which would hide every GPU."""
    if devices == "all":
        return None
    indices = [int(i) for i in devices]
    if not indices:
        raise ValueError("infra.gpu.devices must be 'all' or a non-empty list")
    return ",".join(str(i) for i in indices)


def resolve_host_path(path: str, repo_root: Path) -> str:
    """Mount sources: absolute as given, relative against the repository root."""
    candidate = Path(path).expanduser()
    return str(candidate if candidate.is_absolute() else (repo_root / candidate).resolve())


def compose_environment(
    infra: Mapping[str, Any],
    host_env: Mapping[str, str],
    uid: int,
    gid: int,
    repo_root: Path,
) -> dict[str, str]:
    """The environment ``docker compose`` runs with, built from scratch (nothing inherited
    implicitly): the Docker CLI's own variables, ``ASTRAI_UID``/``ASTRAI_GID``, the container
    settings and mounts as ``ASTRAI_*`` interpolation variables, ``CUDA_VISIBLE_DEVICES`` from
    ``infra.gpu.devices`` (absent for ``all``; an inherited value, empty or not, is never
    used), ``NCCL_*`` from the host, then ``infra.environment`` (which wins)."""
    env = {name: host_env[name] for name in DOCKER_CLI_VARIABLES if name in host_env}
    container, mounts = infra["container"], infra["mounts"]
    env.update(
        {
            "ASTRAI_UID": str(uid),
            "ASTRAI_GID": str(gid),
            "ASTRAI_IMAGE": str(container["image"]),
            "ASTRAI_SHM_SIZE": str(container["shm_size"]),
            "ASTRAI_IPC": str(container["ipc"]),
            "ASTRAI_STOP_GRACE_PERIOD": str(container["stop_grace_period"]),
            "ASTRAI_DATA_DIR": resolve_host_path(mounts["data"], repo_root),
            "ASTRAI_MODELS_DIR": resolve_host_path(mounts["models"], repo_root),
            "ASTRAI_OUTPUTS_DIR": resolve_host_path(mounts["outputs"], repo_root),
        }
    )
    visible = cuda_visible_devices(infra["gpu"]["devices"])
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    env.update({k: v for k, v in host_env.items() if k.startswith(FORWARDED_PREFIX)})
    env.update({str(k): str(v) for k, v in (infra.get("environment") or {}).items()})
    return env


def forwarded_names(env: Mapping[str, str], infra: Mapping[str, Any]) -> list[str]:
    """Variables passed into the container with value-less ``-e NAME`` flags."""
    names = {k for k in env if k.startswith(FORWARDED_PREFIX)}
    names |= {str(k) for k in (infra.get("environment") or {})}
    if "CUDA_VISIBLE_DEVICES" in env:
        names.add("CUDA_VISIBLE_DEVICES")
    return sorted(names)


CONTAINER_TRAIN_SCRIPT = "/workspace/train.py"


def container_processes(infra: Mapping[str, Any]) -> int | None:
    """Processes the job runs in its container: ``infra.nproc_per_node`` when a number, the
    length of ``infra.gpu.devices`` for ``auto`` with a list, and None for ``auto`` with
    ``all`` (the host cannot count the container's GPUs: train.py decides inside)."""
    nproc = infra.get("nproc_per_node", "auto")
    if nproc != "auto":
        return int(nproc)
    devices = infra["gpu"]["devices"]
    return None if devices == "all" else len(devices)


def compose_argv(
    docker: str,
    compose_file: Path,
    service: str,
    forwarded: Sequence[str],
    job_dir: Path,
    overrides: Sequence[str],
    processes: int | None = None,
) -> list[str]:
    """``docker compose -f FILE run --rm -T [-e NAME]... --volume JOB:JOB SERVICE overrides...
    hydra.run.dir=JOB``. The job dir is mounted at the same absolute path, so what the
    container writes (summary.json, checkpoints) is where Hydra expects it on the host. With
    ``processes`` > 1 the container runs ``torchrun --standalone --nproc_per_node=N
    /workspace/train.py ...`` instead of the image's entrypoint. Never ``--build``: only
    ``make docker-build`` builds."""
    argv = [docker, "compose", "-f", str(compose_file), "run", "--rm", "-T"]
    multi = processes is not None and processes > 1
    if multi:
        argv += ["--entrypoint", "torchrun"]
    for name in forwarded:
        argv += ["-e", name]
    argv += ["--volume", f"{job_dir}:{job_dir}", service]
    if multi:
        argv += ["--standalone", f"--nproc_per_node={processes}", CONTAINER_TRAIN_SCRIPT]
    argv += [o for o in overrides if not o.startswith("hydra.run.dir=")]
    argv.append(f"hydra.run.dir={job_dir}")
    return argv
