"""The launcher class Hydra instantiates; the work lives in ``_core`` (imported lazily, so plugin
discovery stays cheap)."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class DockerLauncher(Launcher):
    """Runs every job of a multirun as one ``docker compose run`` of the astrai container."""

    def __init__(
        self,
        compose_file: str = "docker/compose.yaml",
        cpu_compose_file: str = "docker/compose.cpu.yaml",
        service: str = "trainer",
        docker: str = "docker",
        tail_lines: int = 20,
        job_name: str | None = None,
        detach: bool = False,
        preflight_only: bool = False,
    ) -> None:
        self.compose_file = compose_file
        self.cpu_compose_file = cpu_compose_file
        self.service = service
        self.docker = docker
        self.tail_lines = tail_lines
        self.job_name = job_name
        self.detach = detach
        self.preflight_only = preflight_only
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function  # never called: jobs run in the container

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from hydra_plugins.astrai_docker_launcher import _core

        return _core.launch(self, job_overrides, initial_job_idx)
