"""Real ``python train.py`` processes for the end-to-end tests: the command, a quick preset, a
run's last logged step and checkpoint weights, and the embedded addition task written as JSONL
files (``task=dataset`` tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from astrai.tasks import AdditionTask

REPO = Path(__file__).resolve().parents[1]
TRAIN = str(REPO / "train.py")
QUICK = [
    "debug=quick",  # conf/debug/quick.yaml
]


def run_train(
    args: list[str],
    cwd: Path,
    timeout: int = 120,
    threads: int | None = 1,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``python train.py args`` in ``cwd``; ``threads=None`` keeps torch's default (as
    ``make train`` runs), an int pins ``OMP_NUM_THREADS`` (quick runs on a shared machine);
    ``extra_env`` is added to (or replaces entries of) this process's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "HYDRA_FULL_ERROR")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, TRAIN, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_logged_step(run_dir: Path) -> int:
    """The step of the last complete row of ``run_dir/metrics.jsonl``; -1 for none."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return -1
    lines = path.read_text().splitlines()
    try:
        return json.loads(lines[-1])["step"] if lines else -1
    except ValueError:
        return -1  # a line being written


def checkpoint_weights(path: Path) -> dict:
    """The tensors of a ``model.safetensors`` file."""
    from safetensors.torch import load_file

    return load_file(str(path))


def write_addition_files(directory: Path) -> tuple[Path, Path]:
    """The embedded addition task as two JSONL files: every training problem, and the held-out
    ones in ``eval_problems`` order (the same split)."""
    task = AdditionTask()
    held_out = task.eval_prompts(1000)
    every = [f"{a}+{b}=" for a in range(10) for b in range(10)]
    train = [p for p in every if p not in set(held_out)]
    paths = directory / "train.jsonl", directory / "eval.jsonl"
    for path, prompts in zip(paths, (train, held_out), strict=True):
        rows = [{"prompt": p, "answer": task.answer(p)} for p in prompts]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths
