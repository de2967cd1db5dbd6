"""The host side of a Docker launch, before any container starts: the container user, the
compose environment, the mount folders and ``docker/preflight.py``."""

from __future__ import annotations

import json
import logging
import os
import pwd
import subprocess
import sys
from pathlib import Path

from hydra_plugins.astrai_docker_launcher._environment import (
    compose_environment,
    container_plan,
    container_user,
    needs_gpus,
    user_tag,
)
from hydra_plugins.astrai_docker_launcher._job import Job

log = logging.getLogger(__name__)

MOUNT_VARIABLES = {
    "data": "ASTRAI_DATA_DIR",
    "models": "ASTRAI_MODELS_DIR",
    "outputs": "ASTRAI_OUTPUTS_DIR",
}
PREFLIGHT_SCRIPT = Path("docker") / "preflight.py"  # relative to the repository root


class HostError(Exception):
    """A host problem found before any container starts; the message is one line."""


def container_ids() -> tuple[int, int]:
    """The container's uid:gid (``ASTRAI_UID``/``ASTRAI_GID``, default this process's)."""
    return container_user(os.environ, os.getuid(), os.getgid())


def launching_user() -> tuple[int, str]:
    """The uid of the user who launches (the ``astrai.user`` label, ``id -u`` for the make
    targets) and its ``user_tag`` for container names (a uid without a passwd entry:
    ``u<uid>``)."""
    uid = os.getuid()
    try:
        login: str | None = pwd.getpwuid(uid).pw_name
    except KeyError:
        login = None
    return uid, user_tag(uid, login)


def job_environment(infra: dict, repo_root: Path) -> dict[str, str]:
    """The environment a job's ``docker compose`` commands run with (``compose_environment``)."""
    uid, gid = container_ids()
    return compose_environment(infra, os.environ, uid, gid, repo_root)


def make_dirs(path: Path) -> list[Path]:
    """``mkdir -p path``; the folders it created, outermost first. Run as root for a container
    user that is not root (``ASTRAI_UID``), they are given to that user, who writes into them."""
    missing = [p for p in (path, *path.parents) if not p.exists()][::-1]
    path.mkdir(parents=True, exist_ok=True)
    uid, gid = container_ids()
    if os.geteuid() == 0 and (uid, gid) != (0, 0):
        for folder in missing:
            os.chown(folder, uid, gid)
    return missing


def prepare_mounts(infra: dict, repo_root: Path) -> None:
    """Create missing mount folders: ``outputs`` silently (runs write there), ``data`` and
    ``models`` empty, with one info line each (the job may expect files there)."""
    env = job_environment(infra, repo_root)
    for key, variable in MOUNT_VARIABLES.items():
        path = Path(env[variable])
        if path.exists() and not path.is_dir():
            raise HostError(f"infra.mounts.{key}: {path} is not a directory")
        if make_dirs(path) and key != "outputs":
            log.info(
                "infra.mounts.%s: created the empty folder %s (mounted at /%s)", key, path, key
            )


def run_preflight(jobs: list[Job], files_of: dict[int, list[Path]], repo_root: Path) -> None:
    """``docker/preflight.py`` once per distinct (infra, compose files) of the jobs, with the
    compose environment each job's ``docker compose run`` gets; HostError on the first
    failure."""
    checked: set[str] = set()
    for job in jobs:
        files = files_of[job.idx]
        key = json.dumps([job.infra, [str(f) for f in files]], sort_keys=True)
        if key in checked:
            continue
        checked.add(key)
        env = job_environment(job.infra, repo_root)
        argv = [sys.executable, str(repo_root / PREFLIGHT_SCRIPT), "--image", env["ASTRAI_IMAGE"]]
        if needs_gpus(container_plan(job.infra)):
            argv.append("--gpus")
        # /data and /models are mounted read-only: readable is enough there
        for key, variable in MOUNT_VARIABLES.items():
            argv += ["--mount" if key == "outputs" else "--read-mount", env[variable]]
        for path in files:
            argv += ["--compose-file", str(path)]
        result = subprocess.run(
            argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        if result.returncode != 0:
            reason = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
            raise HostError(reason[0].removeprefix("preflight: "))
