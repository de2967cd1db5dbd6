"""astrai as a library: the wheel built from the checkout holds every config, and a plain
(non-editable) install of the checkout in a new venv trains from an empty directory, through the
console script and through the Python API.

The install is the one a user runs (``pip install <clone>``), with the lock's versions; uv does
the resolve (it is what ``make install`` uses, and reuses CI's cache: seconds, not minutes), and
pip installs torch, as in the Makefile: pip reads the machine's pip config, where the local CPU
build of torch may lie.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from tests.train_runs import REPO

UV = Path(sys.executable).parent / "uv"
TRAIN_LOCK = REPO / "requirements" / "train.txt"

API_SCRIPT = """
import json, astrai
summary = astrai.fit(["debug=quick", "trainer.total_steps=1"], run_dir="api-run")
print(json.dumps({"step": summary["step"], "eval_prompts": summary["eval_prompts"]}))
"""


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow  # ~40 s: a wheel build, a new venv's install and two runs
def test_a_wheel_of_the_checkout_holds_conf_and_trains_from_any_directory(tmp_path: Path) -> None:
    # the wheel: every YAML file of conf/ inside, at astrai/conf/
    wheels = tmp_path / "dist"
    _run([str(UV), "build", "--wheel", "--out-dir", str(wheels), str(REPO)], cwd=tmp_path)
    [wheel] = wheels.glob("astrai-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n.removeprefix("astrai/conf/") for n in archive.namelist() if "/conf/" in n}
    in_checkout = {p.relative_to(REPO / "conf").as_posix() for p in (REPO / "conf").rglob("*.yaml")}
    assert shipped == in_checkout and "train.yaml" in shipped

    # a plain install of the checkout in a new venv (not editable: nothing points back at it)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0"], cwd=tmp_path)
    _run(
        [
            str(UV),
            "pip",
            "install",
            "--quiet",
            "--python",
            str(python),
            str(REPO),
            "torch==2.13.0",
            "-c",
            str(TRAIN_LOCK),
        ],
        cwd=tmp_path,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = _run(
        [str(python), "-c", "import astrai.paths as p; print(p.CONFIG_DIR)"], tmp_path, env
    )
    assert Path(where.strip()).is_relative_to(venv), where  # the wheel's copy, not the checkout

    # from an empty directory: the console script, then the Python API
    empty = tmp_path / "empty"
    empty.mkdir()
    _run([str(venv / "bin" / "astrai-train"), "debug=quick", "hydra.run.dir=cli-run"], empty, env)
    summary = json.loads((empty / "cli-run" / "summary.json").read_text())
    assert summary["step"] == 2 and (empty / "cli-run" / ".hydra" / "overrides.yaml").is_file()
    out = _run([str(python), "-c", API_SCRIPT], empty, env)
    assert json.loads(out.strip().splitlines()[-1]) == {"step": 1, "eval_prompts": 13}
    assert (empty / "api-run" / "metrics.jsonl").is_file()
