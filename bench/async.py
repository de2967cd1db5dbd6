"""Wall time per RL step, ``train_type.max_policy_lag=1`` vs 0, side by side in one run.

Two trainers of the default job (GRPO, ``model=tiny``, addition): the synchronous loop as it
ships (``max_policy_lag=0``), and the same job with the next step's rollout sampled on a thread
of its own while this step updates (``max_policy_lag=1`` with the correction it requires,
``engine.old_logprobs=recompute engine.correction=token_truncate``: the recomputed π_old is one
more forward per step, part of lag 1's cost). Each round times ``--steps`` consecutive
``train_step()`` calls of each trainer, in alternating order; the lag-1 arm's round ends by
waiting for the rollout it has in flight, so a round counts as many samplings as updates and no
sampling runs while the other arm is timed. Both train on (their own runs continue from round
to round). The sampling share printed first (the lag-0 arm's ``time/sample_s`` against the
rest of its ``perf/step_s``: reference scoring, update) bounds the gain: with sampling ``s`` and
the rest ``u`` of a step, overlapping them at best leaves ``max(s, u) / (s + u)``.

The last line is ``ratio: <lag 1 ÷ lag 0>``, the median of the rounds' ratios (the goal: ≤ 0.7).

    python bench/async.py [--rounds 10] [--steps 5] [--threads N] [overrides...]
    python bench/async.py --quick     # one small round: checks the script (CI)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from astrai.config.compose import compose_train_config
from astrai.training.run import Run

LAG_1 = [
    "train_type.max_policy_lag=1",
    "engine.old_logprobs=recompute",
    "engine.correction=token_truncate",
]
QUICK = ["train_type.prompts_per_step=8", "train_type.group_size=4"]


def build(overrides: list[str], run_dir: Path) -> Run:
    return Run(compose_train_config(["trainer.progress_bar=false", *overrides]), run_dir)


def time_steps(trainer: Run, steps: int) -> tuple[float, list[dict[str, float]]]:
    """Seconds per step over ``steps`` calls, the in-flight rollout's sampling included."""
    start = time.perf_counter()
    rows = [trainer.train_step() for _ in range(steps)]
    pipeline = trainer.started.rollouts.pipeline
    if pipeline is not None:
        pipeline.settle()  # the next step's sampling, started during the last update
    return (time.perf_counter() - start) / steps, rows


def compare(
    overrides: list[str], rounds: int, steps: int, warmup: int = 2
) -> tuple[list[tuple[float, float]], dict[str, float]]:
    """Paired rounds of the job ``overrides`` at lag 0 and 1: per round (lag 0, lag 1) seconds
    per step, and the lag-0 arm's median sampling and rest-of-step seconds."""
    with tempfile.TemporaryDirectory() as sync_dir, tempfile.TemporaryDirectory() as lag_dir:
        sync = build(overrides, Path(sync_dir))
        lagged = build([*overrides, *LAG_1], Path(lag_dir))
        try:
            time_steps(sync, warmup)
            time_steps(lagged, warmup)
            pairs, shares = [], []
            for r in range(rounds):  # alternating order: both see the same machine load
                if r % 2 == 0:
                    sync_s, rows = time_steps(sync, steps)
                    lag_s, _ = time_steps(lagged, steps)
                else:
                    lag_s, _ = time_steps(lagged, steps)
                    sync_s, rows = time_steps(sync, steps)
                pairs.append((sync_s, lag_s))
                shares += [
                    (r["time/sample_s"], r["perf/step_s"] - r["time/sample_s"]) for r in rows
                ]
                print(
                    f"round {r + 1}: lag 0 {sync_s:.3f} s/step, lag 1 {lag_s:.3f} s/step, "
                    f"ratio {lag_s / sync_s:.3f}"
                )
        finally:
            for trainer in (sync, lagged):
                trainer.close()
                trainer.started.logger.close()
    sample = statistics.median(s for s, _ in shares)
    rest = statistics.median(u for _, u in shares)
    return pairs, {"sample_s": sample, "rest_s": rest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="paired rounds after a warm-up")
    parser.add_argument("--steps", type=int, default=5, help="steps of each arm per round")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (lag 1 halves)")
    parser.add_argument("--quick", action="store_true", help="a tiny workload: checks the script")
    parser.add_argument("overrides", nargs="*", help="train.py overrides for both arms")
    args = parser.parse_args()
    overrides = list(args.overrides)
    if args.quick:
        args.rounds, args.steps, overrides = 1, 2, [*QUICK, *overrides]
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads (lag 1: "
        f"{max(1, torch.get_num_threads() // 2)} sampling + as many updating); job: "
        f"default{' ' + ' '.join(overrides) if overrides else ''}"
    )
    pairs, shares = compare(overrides, args.rounds, args.steps)
    s, u = shares["sample_s"], shares["rest_s"]
    print(
        f"lag 0 step: sampling {s:.3f} s + the rest {u:.3f} s (median): overlapping them leaves "
        f"at best {max(s, u) / (s + u):.2f} of the step"
    )
    sync = statistics.median(p[0] for p in pairs)
    lag = statistics.median(p[1] for p in pairs)
    print(f"median: lag 0 {sync:.3f} s/step, lag 1 {lag:.3f} s/step")
    print(f"ratio: {statistics.median(p[1] / p[0] for p in pairs):.3f}")


if __name__ == "__main__":
    main()
