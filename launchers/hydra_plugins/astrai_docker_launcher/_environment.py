"""What a job's ``docker compose run`` sees: its environment and its argv. Pure functions."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from astrai.config.container_paths import mount_source
from astrai.config.devices import CUDA_VISIBLE_DEVICES, DevicePlan, infra_plan
from astrai.config.duration import parse_duration
from astrai.config.environment import DOCKER_CLI_VARIABLES, reserved_reason

# DOCKER_CLI_VARIABLES: what the Docker CLI itself needs to reach the engine, from the host
# only (validate_config refuses them in infra.environment); none of it is passed into the
# container (compose only passes the names compose.yaml lists and the -e flags below).

FORWARDED_PREFIX = "NCCL_"
# NCCL variables that name the host's network interfaces or InfiniBand adapters: the container
# sits on compose's bridge network (its own eth0, no host HCA), where such a name selects
# nothing and NCCL fails to find an interface. Never taken from the host; infra.environment
# may set them to the container's own names.
HOST_INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA")
GPU_DEVICES_KEY = "infra.gpu.devices"
DEVICE_KEY = "infra.device"
CONTAINER_PREFIX = "astrai-"  # named jobs run in containers astrai-<user>-<name>[-<job num>]
JOB_LABEL = "astrai.job"  # the job name, on every named job's container
USER_LABEL = "astrai.user"  # the launching user's uid, on every container (make docker-stop)
RUN_DIR_LABEL = "astrai.run_dir"  # the job's run dir on the host, on every container
JOB_FILE = "docker-job.json"  # in a named job's run dir: what `make docker-status` lists
# a Docker container name without the prefix; no "/" or ".." (it also names a folder)
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
# a login name that can stand in a container name as it is (Docker's name characters)
LOGIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
# the json-file log driver's sizes: a number with a unit (k, m, g), as Docker reads them
LOG_SIZE = re.compile(r"[1-9][0-9]*[kmg]")


def user_environment(infra: Mapping[str, Any]) -> dict[str, str]:
    """``infra.environment`` without the names the launcher, the Docker CLI, compose, the image
    or torchrun own (``reserved_reason``): ``validate_config`` refuses them; should one get
    through, it is dropped here rather than override what the launcher sets."""
    pairs = (infra.get("environment") or {}).items()
    return {str(k): str(v) for k, v in pairs if reserved_reason(str(k)) is None}


def container_plan(infra: Mapping[str, Any]) -> DevicePlan:
    """The job's device plan as seen from the host (``astrai.config.devices``,
    ``where="container"``): the ``CUDA_VISIBLE_DEVICES`` of the container, what it is told
    about ``infra.gpu.devices`` and how many processes it runs."""
    return infra_plan(infra, "container")


def needs_gpus(plan: DevicePlan) -> bool:
    """Whether the container reserves the engine's NVIDIA GPUs: unless the job is planned on
    the CPU (``infra.gpu.devices=none`` or ``infra.device=cpu``); ``auto`` keeps the
    reservation (the container decides, and sees the GPUs only when they are reserved)."""
    return plan.device != "cpu"


def shared_gpus(plans: Sequence[DevicePlan]) -> tuple[int, int] | None:
    """The positions of the first two GPU jobs whose GPU selections overlap (``all`` overlaps
    every other), or None: CPU jobs reserve no GPU and overlap nothing."""
    taken: list[tuple[int, set[str] | None]] = []
    for position, plan in enumerate(plans):
        if not needs_gpus(plan):
            continue
        visible = plan.cuda_visible_devices  # None: every GPU of the engine
        gpus = None if visible is None else set(visible.split(","))
        for other, used in taken:
            if gpus is None or used is None or gpus & used:
                return other, position
        taken.append((position, gpus))
    return None


def container_user(host_env: Mapping[str, str], uid: int, gid: int) -> tuple[int, int]:
    """The uid:gid the container runs as: ``ASTRAI_UID``/``ASTRAI_GID`` from the host
    environment when set (as ``make docker-build`` built the image), else ``uid``/``gid`` (the
    invoking user's). ValueError naming the variable for a value that is not a number."""
    ids = []
    for name, default in (("ASTRAI_UID", uid), ("ASTRAI_GID", gid)):
        value = host_env.get(name) or str(default)
        if not value.isdigit():
            raise ValueError(f"{name} must be a number (got {value!r})")
        ids.append(int(value))
    return ids[0], ids[1]


def job_name_error(name: str) -> str | None:
    """Why ``hydra.launcher.job_name`` cannot name a job (a folder and a container); None
    when it can."""
    if JOB_NAME.fullmatch(name) is None:
        return (
            f"hydra.launcher.job_name={name!r}: use 1-63 letters, digits, '_' or '-', "
            "starting with a letter or digit (it names the run dir and the container)"
        )
    return None


def user_tag(uid: int, login: str | None) -> str:
    """The launching user in a container name: the login name when Docker accepts it as it
    is, else ``u<uid>``. Two users' jobs of the same name then get different containers."""
    if login is not None and LOGIN_NAME.fullmatch(login):
        return login
    return f"u{uid}"


def container_name(user: str, job_name: str, job_num: int, sweep: bool) -> str:
    """``astrai-<user>-<name>`` for a single job, ``astrai-<user>-<name>-<num>`` for each job
    of a sweep (``user``: ``user_tag``)."""
    name = f"{CONTAINER_PREFIX}{user}-{job_name}"
    return f"{name}-{job_num}" if sweep else name


def named_job_dir(outputs_dir: Path, job_name: str, job_num: int, sweep: bool) -> Path:
    """A named job's stable run dir: ``<outputs>/<name>`` (a sweep: ``<outputs>/<name>/<num>``),
    the same every time the same command runs, so it resumes from its latest checkpoint."""
    return outputs_dir / job_name / str(job_num) if sweep else outputs_dir / job_name


def compose_environment(
    infra: Mapping[str, Any],
    host_env: Mapping[str, str],
    uid: int,
    gid: int,
    repo_root: Path,
) -> dict[str, str]:
    """The environment ``docker compose`` runs with, built from scratch (nothing inherited
    implicitly): ``NCCL_*`` from the host but for ``HOST_INTERFACE_VARIABLES`` (the host's
    interface names, which the bridge-networked container lacks), ``infra.environment`` over
    them (which may set those for the container), then what the
    launcher owns: the Docker CLI's own variables from the host, ``ASTRAI_UID``/``ASTRAI_GID``,
    the container settings and mounts as ``ASTRAI_*`` interpolation variables and
    ``CUDA_VISIBLE_DEVICES`` from the device plan (absent for ``all``; an inherited value,
    empty or not, is never used). ``validate_config`` has refused every launcher-owned name in
    ``infra.environment``; ``user_environment`` drops any that got through, so the launcher's
    own variables always win (a Docker CLI variable the host does not set stays unset)."""
    env = {
        k: v
        for k, v in host_env.items()
        if k.startswith(FORWARDED_PREFIX) and k not in HOST_INTERFACE_VARIABLES
    }
    env.update(user_environment(infra))
    env.update({name: host_env[name] for name in DOCKER_CLI_VARIABLES if name in host_env})
    container, mounts = infra["container"], infra["mounts"]
    env.update(
        {
            "ASTRAI_UID": str(uid),
            "ASTRAI_GID": str(gid),
            "ASTRAI_IMAGE": str(container["image"]),
            "ASTRAI_SHM_SIZE": str(container["shm_size"]),
            "ASTRAI_IPC": str(container["ipc"]),
            "ASTRAI_STOP_GRACE_PERIOD": compose_duration(container["stop_grace_period"]),
            "ASTRAI_LOG_MAX_SIZE": str(container["log_max_size"]),
            "ASTRAI_LOG_MAX_FILE": str(container["log_max_file"]),
            "ASTRAI_DATA_DIR": str(mount_source(mounts["data"], repo_root)),
            "ASTRAI_MODELS_DIR": str(mount_source(mounts["models"], repo_root)),
            "ASTRAI_OUTPUTS_DIR": str(mount_source(mounts["outputs"], repo_root)),
            # named jobs' kept containers are not "orphans" of the project: no warning
            "COMPOSE_IGNORE_ORPHANS": "true",
        }
    )
    env.pop(CUDA_VISIBLE_DEVICES, None)  # the plan's alone
    visible = container_plan(infra).cuda_visible_devices
    if visible:  # never the empty string, which would hide every GPU
        env[CUDA_VISIBLE_DEVICES] = visible
    return env


def unforwarded_host_variables(infra: Mapping[str, Any], host_env: Mapping[str, str]) -> list[str]:
    """The ``HOST_INTERFACE_VARIABLES`` the host sets that do not reach the container (those
    ``infra.environment`` sets do, with its values): the launcher says so in one line."""
    own = user_environment(infra)
    return [name for name in HOST_INTERFACE_VARIABLES if name in host_env and name not in own]


def log_options_error(container: Mapping[str, Any]) -> str | None:
    """Why ``infra.container.log_max_size`` / ``log_max_file`` cannot bound the container's
    json-file log (Docker's ``max-size`` / ``max-file``); None when they can."""
    size, files = container.get("log_max_size"), container.get("log_max_file")
    if not isinstance(size, str) or LOG_SIZE.fullmatch(size) is None:
        return (
            f"infra.container.log_max_size={size!r}: a size with a unit k, m or g "
            "(e.g. 50m), the most one log file of the container holds"
        )
    if isinstance(files, bool) or not isinstance(files, int) or files < 1:
        return (
            f"infra.container.log_max_file={files!r}: a whole number >= 1, the log files "
            "kept per container"
        )
    return None


def compose_duration(value: str | int | float) -> str:
    """A duration as Compose reads it (Go's syntax: a unit on every number, case-sensitive,
    no spaces): ``parse_duration`` also takes ``600``, ``5M`` and ``2 m``, which Compose
    refuses. Seconds, fixed-point (Go reads no exponent): ``5M`` -> ``300s``, ``1.5s`` ->
    ``1.5s``. ValueError for what ``parse_duration`` refuses."""
    seconds = f"{parse_duration(value):.3f}".rstrip("0").rstrip(".")
    return f"{seconds}s"


def forwarded_names(env: Mapping[str, str], infra: Mapping[str, Any]) -> list[str]:
    """Variables passed into the container with value-less ``-e NAME`` flags."""
    names = {k for k in env if k.startswith(FORWARDED_PREFIX)}
    names |= set(user_environment(infra))
    if CUDA_VISIBLE_DEVICES in env:
        names.add(CUDA_VISIBLE_DEVICES)
    return sorted(names)


def container_overrides(overrides: Sequence[str], plan: DevicePlan) -> list[str]:
    """The job's overrides as the container gets them: when the plan narrows
    ``CUDA_VISIBLE_DEVICES``, ``infra.gpu.devices=all`` replaces the job's own
    ``infra.gpu.devices`` (the container's GPU 0 is then the first selected one; passing the
    list again would select twice). A GPU job with ``infra.device=auto`` is told
    ``infra.device=cuda``: its container reserves GPUs, so one that sees none (a driver too old
    for the image's CUDA, a CPU build of torch) stops at start with one line instead of
    training on the CPU unnoticed."""
    kept = list(overrides)
    if plan.narrows:
        kept = [o for o in kept if _key(o) != GPU_DEVICES_KEY]
        kept.append(f"{GPU_DEVICES_KEY}={plan.gpu_devices}")
    if plan.device is None:  # auto, GPUs reserved (a CPU plan says "cpu")
        kept = [o for o in kept if _key(o) != DEVICE_KEY]
        kept.append(f"{DEVICE_KEY}=cuda")
    return kept


def _key(override: str) -> str:
    """The config key an override sets (``+``/``~``/``++`` prefixes dropped)."""
    return override.split("=", 1)[0].lstrip("+~")


def compose_files(compose_file: Path, cpu_compose_file: Path, plan: DevicePlan) -> list[Path]:
    """The compose files of a job: ``compose_file``, plus ``cpu_compose_file`` (which drops the
    GPU reservation) when the job needs no GPU."""
    return [compose_file] if needs_gpus(plan) else [compose_file, cpu_compose_file]


def compose_argv(
    docker: str,
    files: Sequence[Path],
    service: str,
    forwarded: Sequence[str],
    job_dir: Path,
    overrides: Sequence[str],
    *,
    user_id: int,
    job_name: str | None = None,
    container: str | None = None,
    detach: bool = False,
) -> list[str]:
    """``docker compose -f FILE... run (--rm | --name CONTAINER) [-d] -T [-e NAME]...
    --label astrai.user=UID --label astrai.run_dir=JOB [--label astrai.job=NAME]
    --volume JOB:JOB SERVICE overrides... hydra.run.dir=JOB``. ``user_id``: the launching user's
    uid, by which ``make docker-stop``/``-logs`` find that user's containers only. An unnamed job's
    container is removed when it exits; a named job's (``container``) stays until the job next
    starts, so its exit code and logs can still be read. The job dir is mounted at the same absolute
    path, so what the container writes (summary.json, checkpoints) is where Hydra expects it on the
    host. The container always runs the image's ``train.py``: a job of several processes starts its
    own workers there (``infra.nproc_per_node``, ``auto`` = the GPUs it sees), so ``docker stop``
    reaches the parent that forwards SIGTERM and exits 0 after the checkpoint — torchrun's agent
    would kill the workers after 30 s and exit 1. Never ``--build``: only ``make docker-build``
    builds."""
    argv = [docker, "compose"]
    for path in files:
        argv += ["-f", str(path)]
    argv += ["run", "--rm"] if container is None else ["run", "--name", container]
    if detach:
        argv.append("-d")
    argv.append("-T")
    for variable in forwarded:
        argv += ["-e", variable]
    argv += ["--label", f"{USER_LABEL}={user_id}"]
    argv += ["--label", f"{RUN_DIR_LABEL}={job_dir}"]
    if job_name is not None:
        argv += ["--label", f"{JOB_LABEL}={job_name}"]
    argv += ["--volume", f"{job_dir}:{job_dir}", service]
    argv += [o for o in overrides if not o.startswith("hydra.run.dir=")]
    argv.append(f"hydra.run.dir={job_dir}")
    return argv
