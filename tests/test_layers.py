"""The import layers of docs/architecture.md hold, and ``lint-imports`` does fail when they break.

``lint-imports`` runs on this checkout with the repository's contracts (``pyproject.toml``), then
on copies of the source tree in ``tmp_path`` with one forbidden import added; the real tree is only
read. A missing ``lint-imports`` is a failure, not a skip: it belongs to the dev extra.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONTRACTS = REPO / "pyproject.toml"
LAUNCHER_PACKAGE = Path("hydra_plugins") / "astrai_docker_launcher"


def _lint_imports() -> str:
    """The ``lint-imports`` of this interpreter's environment (else the one on PATH)."""
    script = Path(sys.executable).with_name("lint-imports")
    found = str(script) if script.is_file() else shutil.which("lint-imports")
    assert found, "lint-imports not found: install the dev extra (pip install -e '.[dev]')"
    return found


def _run(src: Path, launchers: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over ``src/astrai`` and ``launchers/hydra_plugins``: PYTHONPATH puts
    them ahead of the installed copies (the editable astrai, the launcher in site-packages)."""
    paths = [str(src), str(launchers), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.run(
        [_lint_imports(), str(CONTRACTS), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_layers_hold(tmp_path: Path) -> None:
    result = _run(REPO / "src", REPO / "launchers", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 broken" in result.stdout


def _copy_tree(root: Path) -> tuple[Path, Path]:
    """``src/astrai`` and ``launchers/hydra_plugins/astrai_docker_launcher`` copied under
    ``root``; returns the two directories to put on PYTHONPATH."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "src" / "astrai", root / "src" / "astrai", ignore=skip)
    launcher = REPO / "launchers" / LAUNCHER_PACKAGE
    shutil.copytree(launcher, root / "launchers" / LAUNCHER_PACKAGE, ignore=skip)
    return root / "src", root / "launchers"


# (file to append to, relative to the copied roots; the code appended; what the report says)
BREAKS = {
    "config imports training": (
        "src/astrai/config/duration.py",
        "import astrai.training.stopping\n",
        "astrai.config is not allowed to import astrai.training",
    ),
    "a lazy import from models up into checkpoints": (
        "src/astrai/models/weights.py",
        "\n\ndef _upward() -> None:\n    from astrai.checkpoints import io  # noqa: F401\n",
        "astrai.models is not allowed to import astrai.checkpoints",
    ),
    "an entry point imports another one": (
        "src/astrai/generate.py",
        "from astrai.train import main as _train_main\n",
        "astrai.generate is not allowed to import astrai.train",
    ),
    "the launcher imports the trainer": (
        f"launchers/{LAUNCHER_PACKAGE}/_environment.py",
        "import astrai.train\n",
        "hydra_plugins.astrai_docker_launcher is not allowed to import astrai.train",
    ),
    "the math asks about process groups": (
        "src/astrai/algorithms/kl.py",
        "from astrai.distributed import is_fsdp\n",
        "astrai.algorithms is not allowed to import astrai.distributed",
    ),
    "a package is given no layer": (
        "src/astrai/serve.py",
        '"""A new top-level module nobody placed in a layer."""\n',
        "- astrai.serve",
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_an_import_against_the_layers_fails_the_check(tmp_path: Path, case: str) -> None:
    relative, code, message = BREAKS[case]
    src, launchers = _copy_tree(tmp_path / "tree")
    target = tmp_path / "tree" / relative
    with target.open("a", encoding="utf-8") as handle:
        handle.write(code)
    result = _run(src, launchers, cwd=tmp_path)
    assert result.returncode != 0, result.stdout[-3000:]
    assert message in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]


def test_the_math_names_no_process_group() -> None:
    """docs/architecture.md's claim, as ``make lint`` greps it: import-linter sees
    ``astrai.distributed`` but not ``torch.distributed`` (a submodule of an external package)."""
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted((REPO / "src" / "astrai" / "algorithms").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "astrai.distributed" in line or "torch.distributed" in line
    ]
    assert found == []
