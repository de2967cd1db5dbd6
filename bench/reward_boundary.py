"""The cost of the reward boundary (``astrai.rewards.worker``) on the default job, side by side.

The default job (``python train.py``: GRPO on the addition task, ``reward=partial``) scores one
rollout of ``prompts_per_step × group_size`` = 64 × 8 = 512 responses per step with one batched
call per term. Here the same reward, built from the same config node, scores the same realistic
batch (the task's prompts, answers right, half right or wrong) in a reward worker (one round trip
per term per batch: pickling the three lists out, the scores back) and inline in this process
(``RewardTerm`` without a config node), in alternating order. It also times a worker's start
(a fork from the forkserver that preloaded the reward modules: ``RewardWorker`` until its first
reply) and the forkserver's own first start. Last line: ``ratio: <worker ÷ inline per call>``
and the absolute cost per step.

    python bench/reward_boundary.py [--rows 512] [--calls 50] [--starts 10]
    python bench/reward_boundary.py --quick   # 64 rows, a few calls (CI)
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from astrai.config.compose import compose_train_config
from astrai.rewards.base import Reward, RewardTerm
from astrai.rewards.build import build_reward, build_term
from astrai.rewards.config import reward_node
from astrai.rewards.worker import RewardWorker
from astrai.tasks import AdditionTask


def batch(rows: int, seed: int = 0) -> tuple[list[str], list[str], list[str | None]]:
    """``rows`` (prompt, response, answer) triples of the addition task, answered right, half
    right or wrong, as a policy in training does."""
    rng = random.Random(seed)
    problems = AdditionTask().train_problems(seed, 0, rows)
    responses = []
    for p in problems:
        answer = p.answer or ""
        choice = rng.random()
        responses.append(answer if choice < 0.4 else answer[:-1] + "9" if choice < 0.7 else "x")
    return [p.text for p in problems], responses, [p.answer for p in problems]


def per_call_ms(reward: Reward, rows: tuple, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        reward.score(*rows)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512, help="responses per batch")
    parser.add_argument("--calls", type=int, default=50, help="timed calls of each")
    parser.add_argument("--starts", type=int, default=10, help="timed worker starts")
    parser.add_argument("--quick", action="store_true", help="a tiny workload (CI)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.calls, args.starts = 64, 5, 3
    node = reward_node(compose_train_config([], validate=False).reward)
    worker = build_reward(node)
    inline = Reward(
        [RewardTerm(t.name, t.weight, t.fn) for t in worker.terms], worker.accuracy_threshold
    )
    rows = batch(args.rows)
    start = time.perf_counter()
    first = worker.score(*rows)  # the forkserver's start, then the worker's
    first_ms = (time.perf_counter() - start) * 1e3
    assert first == inline.score(*rows), "the worker scores otherwise than inline"
    worker_ms: list[float] = []
    inline_ms: list[float] = []
    for _ in range(args.calls):  # alternating: the same machine state for both
        worker_ms += per_call_ms(worker, rows, 1)
        inline_ms += per_call_ms(inline, rows, 1)
    starts = []
    for _ in range(args.starts):
        start = time.perf_counter()
        fresh = RewardWorker(worker._specs, build_term, worker._preload)  # noqa: SLF001 (same terms)
        fresh.call((worker.terms[0].name, rows, {}), None)
        starts.append((time.perf_counter() - start) * 1e3)
        fresh.close()
    worker.close()
    w, i = statistics.median(worker_ms), statistics.median(inline_ms)
    print(f"reward {node.get('_target_')}: {args.rows} responses per call, {args.calls} calls")
    print(f"first call (forkserver + worker start + call): {first_ms:.1f} ms")
    print(
        f"worker start (fork from the forkserver, until its first reply): "
        f"{statistics.median(starts):.1f} ms median"
    )
    print(f"per call: worker {w:.2f} ms, inline {i:.2f} ms (median)")
    print(f"ratio: {w / i:.2f} (worker / inline per call); +{w - i:.2f} ms per term per step")


if __name__ == "__main__":
    main()
