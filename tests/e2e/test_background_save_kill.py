"""``kill -9`` while a checkpoint is written in the background (``ckpt.background``): the
partial checkpoint is never taken for one, and the run resumed from the previous complete
checkpoint ends bitwise where the uninterrupted run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tests.constructed_rewards import ALTERNATING
from tests.train_runs import REPO, run_train

from astrai.checkpoints import io
from astrai.checkpoints.completeness import checkpoint_problems, latest_checkpoint

ARGS = [
    "debug=quick",
    "trainer.total_steps=4",
    "ckpt.every_steps=1",  # steps 1-3 written in the background, step 4 (the last) at once
    "ckpt.keep_last=5",
    *ALTERNATING,  # rewards that vary within groups: every update moves the weights
]
HELD_STEP = 3
NOISY = ("time/", "perf/")  # wall-clock measurements differ between any two runs


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith(NOISY)} for row in rows]


def _kill_mid_write(run_dir: Path, cwd: Path) -> str:
    """``train.py`` into ``run_dir`` with step HELD_STEP's write held mid-file, killed there
    (SIGKILL); returns what the held writer wrote into its marker (its thread and file)."""
    marker = cwd / "held"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(OMP_NUM_THREADS="1", ASTRAI_HOLD_STEP=str(HELD_STEP), ASTRAI_HOLD_MARKER=str(marker))
    script = REPO / "tests" / "e2e" / "held_write_train.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), *ARGS, f"hydra.run.dir={run_dir}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (marker.is_file() and marker.read_text().endswith("\n")):
            assert proc.poll() is None, f"exited {proc.returncode}: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "the held write never began"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return marker.read_text()


@pytest.mark.slow  # ~15-25 s: three train.py runs
def test_kill_9_during_a_background_write_resumes_from_the_previous_checkpoint(
    tmp_path: Path,
) -> None:
    straight_dir, killed_dir = tmp_path / "straight", tmp_path / "killed"
    straight = run_train([*ARGS, f"hydra.run.dir={straight_dir}"], tmp_path, timeout=180)
    assert straight.returncode == 0, straight.stderr[-3000:]

    held = _kill_mid_write(killed_dir, tmp_path)
    assert held.startswith("astrai-checkpoint-write "), held  # the writer thread, not the step
    root = killed_dir / "checkpoints"
    names = sorted(p.name for p in root.iterdir())
    # step 3's partial write: a temporary holding the files written before optimizer.pt, and
    # half of that
    [partial] = [name for name in names if name.startswith(f".step_{HELD_STEP}.tmp-")]
    assert names == [partial, "reference.safetensors", "step_1", "step_2"], names
    assert sorted(p.name for p in (root / partial).iterdir()) == [
        "config.json",
        "model.safetensors",
        "optimizer.pt",
        "tokenizer.json",
    ]
    assert checkpoint_problems(root / "step_2") == []
    latest = latest_checkpoint(killed_dir)  # what ckpt.resume=auto resumes
    assert latest is not None and latest.path == root / "step_2"

    resumed = run_train([*ARGS, f"hydra.run.dir={killed_dir}"], tmp_path, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {root / 'step_2'} at step 2" in (killed_dir / "train.log").read_text()
    # the partial temporary is gone (each save removes stale temporaries)
    assert sorted(p.name for p in root.iterdir()) == [
        "reference.safetensors",
        *(f"step_{n}" for n in range(1, 5)),
    ]
    final, expected = root / "step_4", straight_dir / "checkpoints" / "step_4"
    assert (final / "model.safetensors").read_bytes() == (
        expected / "model.safetensors"
    ).read_bytes()
    a, b = io.load_torch(final / "optimizer.pt"), io.load_torch(expected / "optimizer.pt")
    moments = [(a["state"][i][k], b["state"][i][k]) for i in a["state"] for k in a["state"][i]]
    assert moments and all(torch.equal(x, y) for x, y in moments)
    assert _rows(killed_dir) == _rows(straight_dir)
    assert [row["step"] for row in _rows(killed_dir)] == [0, 1, 2, 3, 4]
    # the weights moved: the equality above is not of untouched weights
    first = load_file(str(root / "step_1" / "model.safetensors"))
    last = load_file(str(final / "model.safetensors"))
    assert any(not torch.equal(first[k], last[k]) for k in first)
