"""``python train.py`` as a user runs it: bad overrides fail cleanly, tiny runs complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAIN = str(REPO / "train.py")
QUICK = [
    "trainer.total_steps=2",
    "trainer.eval_every=1",
    "trainer.eval_prompts=8",
    "trainer.progress_bar=false",
    "train_type.prompts_per_step=4",
    "train_type.group_size=2",
]


def run_train(
    args: list[str], cwd: Path, timeout: int = 120, threads: int | None = 1
) -> subprocess.CompletedProcess:
    """``python train.py args`` in ``cwd``; ``threads=None`` keeps torch's default (as
    ``make train`` runs), an int pins ``OMP_NUM_THREADS`` (quick runs on a shared machine)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "HYDRA_FULL_ERROR")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return subprocess.run(
        [sys.executable, TRAIN, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("train_type=nope", "train_type/nope"),
        ("train_type.group_size=1", "train_type.group_size"),
        ("model.hidden_size=-3", "model.hidden_size"),
        ("train_type.clip_eps=abc", "train_type.clip_eps"),
        ("trainer.total_steps=ten", "trainer.total_steps"),
        ("infra.gpu.devices=[1,1]", "infra.gpu.devices"),
        ("train_type=online_ppo critic=none", "critic=value_model"),
        ("train_type=online_ppo train_type.ppo_gamma=1.5", "train_type.ppo_gamma"),
        ("train_type=online_ppo train_type.ppo_gae_lambda=-1", "train_type.ppo_gae_lambda"),
        ("train_type=online_ppo train_type.kl_estimator=k7", "train_type.kl_estimator"),
    ],
)
def test_bad_override_exits_nonzero_with_one_clear_message(
    tmp_path: Path, override: str, needle: str
) -> None:
    result = run_train(override.split(), cwd=tmp_path)
    assert result.returncode != 0
    assert needle in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    if result.stderr.startswith("astrai: config error"):
        assert len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written: no outputs/ folder


@pytest.mark.parametrize("task", ["addition", "reverse", "sort"])
def test_each_builtin_task_runs(tmp_path: Path, task: str) -> None:
    run_dir = tmp_path / "run"
    result = run_train([f"task={task}", *QUICK, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["step"] == 2
    assert 0.0 <= summary["eval/accuracy"] <= 1.0
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert (run_dir / "config.yaml").is_file()
    assert "done: 2 steps" in result.stdout  # the final console line
