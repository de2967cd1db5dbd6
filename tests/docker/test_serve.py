"""``make docker-serve MODEL=<export dir>`` against a fake ``docker`` first on PATH: the argument
checks, and the ``docker compose ... up server`` call it makes, whose environment the real Compose
then renders into the model mount.

``tests/launcher/fake_docker.py`` does not fit here (it runs ``train.py`` for ``compose run`` and
refuses ``up``); this fake records its argv and environment and, for ``compose ... up server``,
runs the real Compose ``config`` with the same files, profile and environment instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.docker.compose_files import DOCKER_MK, REPO_ROOT, compose_binary

FAKE_DOCKER = """#!{python}
import json, os, subprocess, sys
argv = sys.argv[1:]
with open(os.path.join(os.environ["FAKE_DOCKER_DIR"], "calls.jsonl"), "a") as f:
    f.write(json.dumps({{"argv": argv, "env": dict(os.environ)}}) + "\\n")
if argv[:1] == ["compose"] and argv[-2:] == ["up", "server"]:
    rendered = subprocess.run(
        [{compose!r}, *argv[1:-2], "config", "--format", "json", "server"],
        capture_output=True, text=True,
    )
    with open(os.path.join(os.environ["FAKE_DOCKER_DIR"], "rendered.json"), "w") as f:
        f.write(rendered.stdout)
    sys.exit(rendered.returncode)
sys.exit(64)
"""


@pytest.fixture
def make_serve(tmp_path: Path):
    """Run ``make docker-serve ARGS`` from the repo root through a stand-in for the main Makefile
    whose $(STAMP) fails (docker-serve must not set up the venv), with a fake docker on PATH.
    Returns (result, calls, rendered compose config or None)."""
    wrapper = tmp_path / "Makefile"
    wrapper.write_text(
        "PYTHON ?= python3\nBIN := .venv/bin\nSTAMP := stamp-for-test\nARGS ?=\n"
        "$(STAMP):\n\t@echo 'the venv stamp ran' >&2; exit 99\n"
        f"include {DOCKER_MK}\n"
    )
    record_dir = tmp_path / "docker-record"
    bin_dir = tmp_path / "bin"
    record_dir.mkdir()
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable, compose=str(compose_binary())))
    docker.chmod(0o755)

    def _run(*args: str, env: dict[str, str] | None = None):
        base = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(tmp_path),
            "DOCKER_CONFIG": str(tmp_path / ".docker"),
            "FAKE_DOCKER_DIR": str(record_dir),
        }
        result = subprocess.run(
            ["make", "--no-print-directory", "-f", str(wrapper), "docker-serve", *args],
            env={**base, **(env or {})},
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        calls_file = record_dir / "calls.jsonl"
        calls = (
            [json.loads(line) for line in calls_file.read_text().splitlines()]
            if calls_file.exists()
            else []
        )
        rendered_file = record_dir / "rendered.json"
        rendered = json.loads(rendered_file.read_text()) if rendered_file.exists() else None
        return result, calls, rendered

    return _run


@pytest.fixture
def export_dir(tmp_path: Path) -> Path:
    """A folder shaped like `python -m astrai.export` output (only config.json is checked)."""
    folder = tmp_path / "exports" / "step 100"  # a space: the path must survive quoting
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (None, "say which exported model to serve: make docker-serve MODEL=<dir>"),
        ("", "say which exported model to serve: make docker-serve MODEL=<dir>"),
        ("/nonexistent/astrai-export", "MODEL=/nonexistent/astrai-export is not a directory"),
        ("docker", "MODEL=docker has no config.json"),  # a folder, but no Hugging Face export
    ],
)
def test_bad_model_is_refused_before_docker(make_serve, model: str | None, message: str) -> None:  # noqa: ANN001
    result, calls, _ = make_serve(*([] if model is None else [f"MODEL={model}"]))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if not line.startswith("make: ***")]
    assert lines == [lines[0]] and lines[0].startswith(f"docker-serve: {message}")
    assert calls == []  # docker never ran
    assert "the venv stamp ran" not in result.stderr


def test_model_from_the_environment_is_ignored(make_serve, export_dir: Path) -> None:  # noqa: ANN001
    """MODEL, PORT and NAME are generic names: only the command line sets them."""
    result, calls, _ = make_serve(env={"MODEL": str(export_dir), "PORT": "1", "NAME": "x"})
    assert result.returncode == 2 and calls == []


def test_serve_runs_compose_up_server(make_serve, export_dir: Path) -> None:  # noqa: ANN001
    relative = os.path.relpath(export_dir, REPO_ROOT)  # relative to the repo root, as typed
    result, calls, rendered = make_serve(f"MODEL={relative}")
    assert result.returncode == 0, result.stderr
    assert "the venv stamp ran" not in result.stderr
    (call,) = calls
    # a compose project of this user's own: another user's server is another container
    assert call["argv"] == [
        "compose",
        "-f",
        "docker/compose.yaml",
        "-p",
        f"astrai-serve-{os.getuid()}",
        "--profile",
        "serve",
        "up",
        "server",
    ]
    assert not any("build" in arg for arg in call["argv"])
    assert call["env"]["ASTRAI_SERVE_MODEL"] == str(export_dir.resolve())
    assert "ASTRAI_SERVE_PORT" not in call["env"] and "ASTRAI_SERVE_NAME" not in call["env"]
    assert "http://127.0.0.1:8000/v1" in result.stdout
    # the real Compose, given that environment, mounts the folder read-only at /model
    server = rendered["services"]["server"]
    (volume,) = server["volumes"]
    assert (volume["source"], volume["target"], volume["read_only"]) == (
        str(export_dir.resolve()),
        "/model",
        True,
    )
    assert server["ports"][0]["published"] == "8000"
    # as this user, not vLLM's root (issue 32)
    assert (call["env"]["ASTRAI_UID"], call["env"]["ASTRAI_GID"]) == (
        str(os.getuid()),
        str(os.getgid()),
    )
    assert server["user"] == f"{os.getuid()}:{os.getgid()}"


def test_serve_port_and_name(make_serve, export_dir: Path) -> None:  # noqa: ANN001
    result, calls, rendered = make_serve(f"MODEL={export_dir}", "PORT=9001", "NAME=policy-a")
    assert result.returncode == 0, result.stderr
    (call,) = calls
    assert call["env"]["ASTRAI_SERVE_PORT"] == "9001"
    assert call["env"]["ASTRAI_SERVE_NAME"] == "policy-a"
    server = rendered["services"]["server"]
    assert (server["ports"][0]["host_ip"], server["ports"][0]["published"]) == ("127.0.0.1", "9001")
    assert server["command"][-2:] == ["--served-model-name", "policy-a"]
    assert "http://127.0.0.1:9001/v1" in result.stdout


@pytest.mark.parametrize(("host", "expected"), [("", None), ("1,0", "1,0")])
def test_serve_never_passes_an_empty_cuda_visible_devices(
    make_serve,  # noqa: ANN001
    export_dir: Path,
    host: str,
    expected: str | None,
) -> None:
    """An empty CUDA_VISIBLE_DEVICES (it hides every GPU) is unset before compose runs, and
    compose.yaml would not pass one either; a non-empty one selects the server's GPUs."""
    result, calls, rendered = make_serve(f"MODEL={export_dir}", env={"CUDA_VISIBLE_DEVICES": host})
    assert result.returncode == 0, result.stderr
    (call,) = calls
    assert call["env"].get("CUDA_VISIBLE_DEVICES") == expected
    assert rendered["services"]["server"]["environment"].get("CUDA_VISIBLE_DEVICES") == expected
