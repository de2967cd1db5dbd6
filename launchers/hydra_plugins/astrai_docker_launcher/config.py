"""``hydra/launcher=docker``: registered in Hydra's ConfigStore when Hydra discovers plugins."""

# No `from __future__ import annotations` here: Hydra's discovery imports this module without
# registering it in sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class DockerLauncherConf:
    _target_: str = "hydra_plugins.astrai_docker_launcher.docker_launcher.DockerLauncher"
    compose_file: str = "docker/compose.yaml"  # relative to the repository root
    service: str = "trainer"  # the compose service that runs train.py
    docker: str = "docker"  # the Docker CLI (looked up on PATH)
    tail_lines: int = 20  # log lines quoted when a job fails


ConfigStore.instance().store(
    group="hydra/launcher", name="docker", node=DockerLauncherConf, provider="astrai"
)
