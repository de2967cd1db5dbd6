"""Put the fake Docker CLI first on PATH for a test."""

from __future__ import annotations

import json
import sys
from pathlib import Path

FAKE = Path(__file__).with_name("fake_docker.py")


def install_fake_docker(bin_dir: Path) -> Path:
    """Write an executable ``docker`` into ``bin_dir`` that runs ``fake_docker.py`` with this
    interpreter; return ``bin_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    docker.chmod(0o755)
    return bin_dir


def read_calls(docker_config: Path) -> list[dict]:
    path = docker_config / "fake_docker_calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
