"""On-policy distillation learns on this CPU, and in fewer steps than the task's reward alone
(issue 61's learning acceptance): real ``train.py`` runs of the tiny model, one after another.

1. ``teacher``: the default job (GRPO on addition) until held-out greedy accuracy reaches 0.9;
   its checkpoint is the teacher.
2. For each seed, a fresh student three ways, each until held-out accuracy 0.9
   (``trainer.stop_at``, evaluated every 10 steps) or 10 minutes (``trainer.max_duration``):
   ``grpo`` (the task's reward alone: the default job), ``grpo-opd`` (``distill=opd``: the
   teacher's k1 reward alone, ``use_task_reward=false``), ``ppo-opd`` (``train_type=online_ppo
   distill=opd``: the same reward through GAE and the critic).

A line per run (steps to 0.9, wall seconds, the final ``distill/reverse_kl``), then the table of
seeds × steps and ``ratio: <median GRPO steps ÷ median GRPO-OPD steps>`` (the anchors expect
several times fewer), and ``distill_learning: PASS`` or ``FAIL`` (exit 1): every distillation run
reached 0.9 within its 10 minutes.

    .venv/bin/python bench/distill_learning.py                # ~5 min on 2 cores
    .venv/bin/python bench/distill_learning.py --seeds 0 1 2 3 4
    .venv/bin/python bench/distill_learning.py --quick        # seconds: checks the script (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 600
TARGET = 0.9
STOP = [f"trainer.stop_at={{eval/accuracy:{TARGET}}}", "trainer.eval_every=10"]
STUDENTS: dict[str, list[str]] = {
    "grpo": [],
    "grpo-opd": ["distill=opd"],
    "ppo-opd": ["train_type=online_ppo", "distill=opd"],
}
QUICK = [
    "trainer.total_steps=3",
    "trainer.eval_every=3",
    "trainer.eval_prompts=8",
    "train_type.prompts_per_step=4",
    "train_type.minibatches=1",
]


def train(args: list[str], directory: Path, quick: bool) -> tuple[list[dict], float]:
    """One ``train.py`` run in ``directory``: its metrics rows and wall seconds."""
    args = [*args, f"hydra.run.dir={directory}", "trainer.progress_bar=false"]
    args += QUICK if quick else [f"trainer.max_duration={BUDGET_S}s"]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{directory.name}: train.py exited {result.returncode}:\n{result.stderr[-3000:]}")
    lines = (directory / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines], seconds


def steps_to_target(rows: list[dict]) -> int | None:
    """The first evaluated step with held-out accuracy ≥ ``TARGET`` (None: never)."""
    for row in rows:
        if row.get("eval/accuracy", -1.0) >= TARGET:
            return int(row["step"])
    return None


def last(rows: list[dict], name: str) -> float | None:
    values = [row[name] for row in rows if row.get(name) is not None]
    return values[-1] if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="3-step runs: checks the script")
    args = parser.parse_args()
    seeds = args.seeds[:1] if args.quick else args.seeds
    with tempfile.TemporaryDirectory(prefix="distill-learning-") as tmp:
        root = Path(tmp)
        teacher = root / "teacher"
        rows, seconds = train(STOP, teacher, args.quick)
        print(f"teacher: {steps_to_target(rows)} steps to {TARGET}, {seconds:.0f}s", flush=True)
        steps: dict[str, dict[int, int | None]] = {name: {} for name in STUDENTS}
        for seed in seeds:
            for name, extra in STUDENTS.items():
                overrides = [*extra, f"seed={seed}", *STOP]
                if "distill=opd" in extra:
                    overrides.append(f"teacher.path={teacher}")
                rows, seconds = train(overrides, root / f"{name}-{seed}", args.quick)
                steps[name][seed] = steps_to_target(rows)
                kl = last(rows, "distill/reverse_kl")
                kl_text = "" if kl is None else f", distill/reverse_kl {kl:.3f}"
                print(
                    f"{name} seed {seed}: {steps[name][seed]} steps to {TARGET}, "
                    f"{seconds:.0f}s{kl_text}",
                    flush=True,
                )
    print("seed  " + "  ".join(f"{name:>9}" for name in STUDENTS))
    for seed in seeds:
        print(f"{seed:>4}  " + "  ".join(f"{str(steps[n][seed]):>9}" for n in STUDENTS))
    if args.quick:
        print("distill_learning: quick mode (3 steps a run): no bar")
        return 0
    reached = {name: [s for s in steps[name].values() if s is not None] for name in STUDENTS}
    if reached["grpo"] and reached["grpo-opd"]:
        ratio = statistics.median(reached["grpo"]) / statistics.median(reached["grpo-opd"])
        print(f"ratio: {ratio:.2f} (median GRPO steps ÷ median GRPO-OPD steps)")
    passed = all(len(reached[name]) == len(seeds) for name in STUDENTS if name != "grpo")
    print(f"distill_learning: {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
