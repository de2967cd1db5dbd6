"""The cost of the environment boundary (``astrai.envs.hosts``): process hosts vs thread hosts,
side by side.

The embedded guessing environment (``astrai.envs.guess.Guess``, ``env=guess``: a step compares
one number) plays ``--slots`` episodes at once, each step of each slot one ``call_hosts`` call,
all slots in flight together (``max_concurrency`` = slots), as the episode runner calls them
each turn. Each round times ``--steps`` such turns on process hosts (``env.workers=process``:
one worker process per slot, a round trip through its pipe per call) and on thread hosts
(``env.workers=thread``: a daemon thread per call), in alternating order; the environment's
own work is nanoseconds, so what is timed is the boundary. Also timed: a slot's first ``make``
(process mode: the worker's start, a fork from the forkserver, and its import of the class).

The last line is ``ratio: <process ÷ thread per call>`` with the absolute cost per call.

    python bench/env_boundary.py [--slots 16] [--steps 50] [--rounds 5]
    python bench/env_boundary.py --quick     # 4 slots, a few turns: checks the script (CI)
"""

from __future__ import annotations

import argparse
import statistics
import time

from astrai.envs.guess import Guess
from astrai.envs.hosts import HOST_MODES, EnvHost, HostCall, HostPool, call_hosts
from astrai.envs.tool_calls import ParsedTurn

ROW = {"text": "n7"}
GUESS = ParsedTurn("3")  # a wrong guess: the episode never ends, every step answers "h"
TIMEOUT_S = 30.0


def made(hosts: list[EnvHost]) -> float:
    """Make and reset a ``Guess`` in each of ``hosts``; the seconds the makes took."""
    start = time.perf_counter()
    makes = call_hosts([HostCall(h, "make", (Guess, {}), TIMEOUT_S) for h in hosts], len(hosts))
    seconds = time.perf_counter() - start
    resets = call_hosts([HostCall(h, "reset", (ROW,), TIMEOUT_S) for h in hosts], len(hosts))
    failed = [o.error for o in makes + resets if o.error is not None]
    assert not failed, f"the environment failed: {failed[0]}"
    return seconds


def turns_seconds(hosts: list[EnvHost], steps: int) -> float:
    """Seconds for ``steps`` turns of one step per slot, all slots at once."""
    calls = [HostCall(h, "step", (GUESS,), TIMEOUT_S) for h in hosts]
    start = time.perf_counter()
    for _ in range(steps):
        answers = call_hosts(calls, len(hosts))
        assert all(a.error is None for a in answers), answers[0].error
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=16, help="episodes at once")
    parser.add_argument("--steps", type=int, default=50, help="turns timed per round and mode")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    parser.add_argument("--quick", action="store_true", help="a tiny workload: checks the script")
    args = parser.parse_args()
    if args.quick:
        args.slots, args.steps, args.rounds = 4, 5, 2
    pools = {mode: HostPool(mode) for mode in HOST_MODES}
    try:
        hosts = {mode: pool.hosts(args.slots) for mode, pool in pools.items()}
        first = {mode: made(hosts[mode]) for mode in HOST_MODES}  # the forkserver's start too
        again = {mode: made(hosts[mode]) for mode in HOST_MODES}  # workers kept: a make alone
        for mode in HOST_MODES:
            turns_seconds(hosts[mode], 2)  # warm-up
        per_call: dict[str, list[float]] = {mode: [] for mode in HOST_MODES}
        for _ in range(args.rounds):
            for mode in HOST_MODES:
                seconds = turns_seconds(hosts[mode], args.steps)
                per_call[mode].append(seconds / (args.steps * args.slots))
    finally:
        for pool in pools.values():
            pool.close()
    calls = args.steps * args.slots
    print(f"Guess steps: {args.slots} slots at once, {calls} calls per round, {args.rounds} rounds")
    print(f"{'hosts':<8} {'per call':>10} {'calls/s':>9} {'per turn':>10} {'first make':>11}")
    for mode in HOST_MODES:
        call_s = statistics.median(per_call[mode])
        print(
            f"{mode:<8} {call_s * 1e6:>8.0f} µs {1 / call_s:>9.0f} "
            f"{call_s * args.slots * 1e3:>7.2f} ms {first[mode] * 1e3:>8.1f} ms"
        )
    print(
        f"make in a started slot: process {again['process'] * 1e3:.1f} ms, "
        f"thread {again['thread'] * 1e3:.1f} ms ({args.slots} slots)"
    )
    process, thread = (statistics.median(per_call[mode]) for mode in ("process", "thread"))
    print(
        f"ratio: {process / thread:.2f} (process / thread per call); "
        f"{(process - thread) * 1e6:+.0f} µs per call"
    )


if __name__ == "__main__":
    main()
