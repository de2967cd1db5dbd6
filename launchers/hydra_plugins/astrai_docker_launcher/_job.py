"""What the launch passes around: a composed job (``Job``) and the launcher's settings as the
launch reads them (``LauncherSettings``, what ``DockerLauncher`` holds). A module of its own so
that ``_core`` and ``_host`` share them without importing each other or the launcher class."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hydra.types import HydraContext
from omegaconf import DictConfig


class LauncherSettings(Protocol):
    """``hydra.launcher``'s keys (``config.DockerLauncherConf``) and what Hydra's ``setup`` gave
    the launcher."""

    compose_file: str
    cpu_compose_file: str
    service: str
    docker: str
    tail_lines: int
    job_name: str | None
    detach: bool
    preflight_only: bool
    config: DictConfig | None
    hydra_context: HydraContext | None


@dataclass
class Job:
    """One job of the multirun, composed and placed before any container starts."""

    idx: int
    overrides: list[str]
    config: DictConfig
    infra: dict
    job_dir: Path
    container: str | None  # a named job's container; None: compose's own name, removed on exit
