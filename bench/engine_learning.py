"""``engine=vllm`` learns the default job to the end: real ``train.py`` runs, GRPO and PPO.

The default job (addition, ``model=tiny`` with 2 attention heads of 32 and 1 KV head: vLLM's
CPU attention has no kernel for ``tiny``'s head size 16) for ``--steps`` steps (1,200, the
default job's length) with rollouts and evaluations sampled by vLLM's CPU build, the trainer
recomputing π_old with the default truncated-IS correction (``conf/engine/vllm.yaml``). Per run
it prints the first evaluated step whose ``eval/accuracy`` reaches ``--target`` (0.9), the last
evaluation, the largest ``rollout/logprob_diff_max`` of any step, and the mean step time (the
weight sync's share apart). ``--engines vllm torch`` adds astrai's own sampler on the same job
as the yardstick. The last line is ``reached <target>: <run> step <N>, ...`` (``never`` where a
run did not).

    .venv-vllm/bin/python bench/engine_learning.py                 # ~30-40 min on 2 cores
    .venv-vllm/bin/python bench/engine_learning.py --engines vllm torch
    .venv-vllm/bin/python bench/engine_learning.py --seed 1 --out runs/engine-seed1  # kept
    .venv-vllm/bin/python bench/engine_learning.py --quick         # seconds: CI's vLLM lane

Needs vLLM (``make install-vllm`` builds ``.venv-vllm``). The 100-step version of this check
is a test (``tests/engine/test_vllm_learning.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from astrai.rollout.engines.seeded_vllm import VLLM_INSTALL

REPO = Path(__file__).resolve().parents[1]
HEADS = ["model.num_attention_heads=2", "model.num_key_value_heads=1"]
TRAIN_TYPES = ("online_grpo", "online_ppo")


@dataclass
class Outcome:
    """What one run shows: when it reached the target, where it ended, its mismatch and pace."""

    label: str
    reached: int | None  # first evaluated step with eval/accuracy >= target
    final_accuracy: float
    steps: int
    worst_logprob_diff: float | None  # max rollout/logprob_diff_max over the steps (vllm)
    step_s: float  # mean perf/step_s
    sync_s: float | None  # mean perf/weight_sync_s


def run(
    engine: str,
    train_type: str,
    steps: int,
    eval_every: int,
    extra: list[str],
    target: float,
    workdir: Path,
) -> Outcome:
    """One ``train.py`` run; its ``metrics.jsonl`` read back."""
    run_dir = workdir / f"{engine}-{train_type}"
    args = [
        f"engine={engine}",
        f"train_type={train_type}",
        *HEADS,
        f"trainer.total_steps={steps}",
        f"trainer.eval_every={eval_every}",
        "trainer.progress_bar=false",
        "logger.tensorboard=false",
        "ckpt.every_steps=0",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]
    done = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args], cwd=workdir, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{engine} {train_type} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    evals = [(row["step"], row["eval/accuracy"]) for row in rows if "eval/accuracy" in row]
    trained = [row for row in rows if "perf/step_s" in row]
    diffs = [
        row["rollout/logprob_diff_max"] for row in trained if "rollout/logprob_diff_max" in row
    ]
    syncs = [row["perf/weight_sync_s"] for row in trained if "perf/weight_sync_s" in row]
    return Outcome(
        label=f"{engine} {train_type}",
        reached=next((step for step, acc in evals if acc >= target), None),
        final_accuracy=evals[-1][1],
        steps=len(trained),
        worst_logprob_diff=max(diffs) if diffs else None,
        step_s=statistics.fmean(row["perf/step_s"] for row in trained),
        sync_s=statistics.fmean(syncs) if syncs else None,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--engines", nargs="+", default=["vllm"], choices=["vllm", "torch"])
    parser.add_argument(
        "--train-types", nargs="+", choices=TRAIN_TYPES, help="default: both (--quick: GRPO)"
    )
    parser.add_argument("--quick", action="store_true", help="2 steps of GRPO: checks the script")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        help="an empty dir to keep the runs in (default: a temporary one, deleted)",
    )
    args = parser.parse_args(argv)
    if "vllm" in args.engines and importlib.util.find_spec("vllm") is None:
        print(f"engine=vllm needs vLLM: {VLLM_INSTALL}", file=sys.stderr)
        return 2
    extra: list[str] = []
    steps, eval_every = args.steps, args.eval_every
    train_types = args.train_types or (TRAIN_TYPES[:1] if args.quick else TRAIN_TYPES)
    if args.quick:
        steps, eval_every = 2, 2
        extra = ["trainer.eval_prompts=8", "train_type.prompts_per_step=4"]
    outcomes = []
    extra.append(f"seed={args.seed}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    keep = contextlib.nullcontext(str(args.out)) if args.out is not None else None
    with keep or tempfile.TemporaryDirectory(prefix="astrai-engine-learning-") as tmp:
        for train_type in train_types:
            for engine in args.engines:
                outcome = run(engine, train_type, steps, eval_every, extra, args.target, Path(tmp))
                outcomes.append(outcome)
                print(
                    f"{outcome.label:<18} steps {outcome.steps:>5}  "
                    f"reached {args.target}: {outcome.reached or 'never':>6}  "
                    f"final eval/accuracy {outcome.final_accuracy:.3f}  "
                    f"max logprob_diff {_num(outcome.worst_logprob_diff, '.1e')}  "
                    f"step {outcome.step_s:.3f} s (sync {_num(outcome.sync_s, '.4f')} s)",
                    flush=True,
                )
    reached = ", ".join(f"{o.label} step {o.reached or 'never'}" for o in outcomes)
    print(f"reached {args.target}: {reached}")
    return 0


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


if __name__ == "__main__":
    sys.exit(main())
