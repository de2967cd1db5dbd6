"""``hydra/launcher=docker``: registered in Hydra's ConfigStore when Hydra discovers plugins."""

# No `from __future__ import annotations` here: Hydra's discovery imports this module without
# registering it in sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass
from typing import Optional

from hydra.core.config_store import ConfigStore


@dataclass
class DockerLauncherConf:
    _target_: str = "hydra_plugins.astrai_docker_launcher.docker_launcher.DockerLauncher"
    compose_file: str = "docker/compose.yaml"  # relative to the repository root
    cpu_compose_file: str = "docker/compose.cpu.yaml"  # added for CPU jobs: no GPU reservation
    service: str = "trainer"  # the compose service that runs train.py
    docker: str = "docker"  # the Docker CLI (looked up on PATH)
    tail_lines: int = 20  # log lines quoted when a job fails
    # a stable run dir <infra.mounts.outputs>/<job_name> (a sweep: .../<job_name>/<job num>) and
    # container astrai-<job_name>[-<num>]: the same command again resumes the job
    job_name: Optional[str] = None  # noqa: UP045 (OmegaConf reads typing.Optional)
    detach: bool = False  # start the containers and return (needs job_name)
    preflight_only: bool = False  # check engine, compose, GPUs, mounts and image; start nothing


ConfigStore.instance().store(
    group="hydra/launcher", name="docker", node=DockerLauncherConf, provider="astrai"
)
