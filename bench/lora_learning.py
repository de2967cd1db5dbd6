"""A pretrained model learns under LoRA on this CPU: ``experiment=word_problems_lora`` to the end.

SmolLM2-135M-Instruct (``make smollm2``) with rank-16 adapters on every decoder linear, GRPO on
the shipped GSM8K-style problems, as one real ``train.py`` run. Its ``metrics.jsonl`` is read
back: at every evaluation (greedy answers to the same held-out problems, step 0 = the base
model; when ``trainer.max_duration`` stopped the run between evaluations, its last checkpoint is
evaluated the same way by ``astrai.generate --task``) the answer accuracy (``eval/accuracy``,
math-verify) and the format rate (the response says "The answer is N";
``(eval/reward_mean - eval/accuracy) / 0.5``, exact because both terms are 0 or 1 and the format
term alone stays below the accuracy threshold). Then one step of the
same job as full fine-tuning (``model.lora.rank=null``) in its own process, for the memory:
the peak RSS of each run's process, side by side.

Prints the curve (step, accuracy, format, reward of the step's rollouts), the wall time, the two
peaks, and last ``lora_gain: accuracy +A (x -> y), format +F (x -> y) ...; peak_rss_ratio
lora/full R``.

    .venv/bin/python bench/lora_learning.py              # <= 60 min on 2 cores (its budget)
    .venv/bin/python bench/lora_learning.py --out runs/lora   # keep the run dir
    .venv/bin/python bench/lora_learning.py --quick      # minutes: checks the script (CI)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
FORMAT_WEIGHT = 0.5  # the preset's format term
# run train.py in a child and print that child's peak RSS (KiB on Linux) as the last line
PEAK_RSS = (
    "import resource, subprocess, sys; "
    "code = subprocess.run(sys.argv[1:]).returncode; "
    "print('peak_rss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
    "sys.exit(code)"
)
QUICK = [
    "trainer.total_steps=2",
    "trainer.eval_every=2",
    "trainer.eval_prompts=4",
    "train_type.prompts_per_step=2",
    "train_type.minibatches=1",
    "train_type.micro_batch_size=null",
    "train_type.sampling.max_new_tokens=8",
]


def train(run_dir: Path, overrides: list[str]) -> tuple[float, float]:
    """One ``train.py experiment=word_problems_lora`` run into ``run_dir``: (seconds, peak RSS
    in MB)."""
    args = [
        sys.executable,
        str(REPO / "train.py"),
        "experiment=word_problems_lora",
        "trainer.progress_bar=false",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *args], cwd=REPO, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"train.py {' '.join(overrides)} failed:\n{done.stderr[-3000:]}")
    peak_kib = int(done.stdout.strip().splitlines()[-1].split()[-1])
    return seconds, peak_kib * 1024 / 1e6


def curve(run_dir: Path) -> list[tuple[int, float, float]]:
    """(step, accuracy, format rate) at every evaluation of the run."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    return [
        (
            row["step"],
            row["eval/accuracy"],
            (row["eval/reward_mean"] - row["eval/accuracy"]) / FORMAT_WEIGHT,
        )
        for row in rows
        if "eval/accuracy" in row
    ]


def final_evaluation(run_dir: Path, prompts: int) -> tuple[float, float]:
    """(accuracy, format rate) of the run's last checkpoint on its first ``prompts`` held-out
    problems, greedy, scored by the run's reward: ``astrai.generate --task`` on the adapter
    checkpoint (the evaluation's problems, decoding and reward, as its ``eval/`` metrics)."""
    done = subprocess.run(
        [sys.executable, "-m", "astrai.generate", str(run_dir), "--task", "--n", str(prompts)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"astrai.generate failed:\n{done.stderr[-3000:]}")
    last = done.stdout.strip().splitlines()[-1]  # "# mean reward R, accuracy A"
    reward = float(last.split("mean reward ")[1].split(",")[0])
    accuracy = float(last.rsplit("accuracy ", 1)[1])
    return accuracy, (reward - accuracy) / FORMAT_WEIGHT


def rollout_rewards(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    return {row["step"]: row["rollout/reward_mean"] for row in rows if "rollout/reward_mean" in row}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 tiny steps: checks the script")
    parser.add_argument("--out", type=Path, help="an empty dir to keep the runs in")
    parser.add_argument("overrides", nargs="*", help="extra train.py overrides for both runs")
    args = parser.parse_args(argv)
    if not (REPO / "models/smollm2/config.json").is_file():
        print("needs SmolLM2-135M-Instruct: make smollm2", file=sys.stderr)
        return 2
    extra = [*(QUICK if args.quick else []), *args.overrides]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    keep = contextlib.nullcontext(str(args.out)) if args.out is not None else None
    with keep or tempfile.TemporaryDirectory(prefix="astrai-lora-learning-") as tmp:
        lora_dir, full_dir = Path(tmp) / "lora", Path(tmp) / "full"
        seconds, lora_peak = train(lora_dir, extra)
        points = curve(lora_dir)
        rewards = rollout_rewards(lora_dir)
        steps = max(rewards, default=0)
        if points[-1][0] != steps:  # trainer.max_duration stopped it between evaluations
            config = yaml.safe_load((lora_dir / "config.yaml").read_text())
            points.append((steps, *final_evaluation(lora_dir, config["trainer"]["eval_prompts"])))
        print(f"{'step':>5}  {'accuracy':>8}  {'format':>6}  rollout reward_mean", flush=True)
        for step, accuracy, fmt in points:
            reward = rewards.get(step)
            shown = "-" if reward is None else f"{reward:.3f}"
            print(f"{step:>5}  {accuracy:>8.3f}  {fmt:>6.3f}  {shown}")
        print(
            f"lora: {steps} steps in {seconds / 60:.1f} min (the whole process), peak RSS "
            f"{lora_peak:,.0f} MB",
            flush=True,
        )
        # the same job's first step as full fine-tuning: the policy, its reference copy and
        # AdamW's state over every weight
        full = [*extra, "model.lora.rank=null", "train_type.optimizer.lr=1.0e-6"]
        full += ["trainer.total_steps=1", "trainer.eval_every=1000"]
        _, full_peak = train(full_dir, full)
        print(f"full fine-tuning, 1 step: peak RSS {full_peak:,.0f} MB")
    (s0, a0, f0), (s1, a1, f1) = points[0], points[-1]
    print(
        f"lora_gain: accuracy {a1 - a0:+.3f} ({a0:.3f} -> {a1:.3f}), format {f1 - f0:+.3f} "
        f"({f0:.3f} -> {f1:.3f}) from step {s0} to {s1}; "
        f"peak_rss_ratio lora/full {lora_peak / full_peak:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
