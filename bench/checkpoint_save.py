"""A checkpoint save's blocking time: written at once vs in the background (issue 48, part 5).

A ~100M-parameter astrai Llama (random weights: hidden 768, 12 layers, 12 query and 4 key/value
heads, SwiGLU 2048, a 32,000-token vocabulary, tied embeddings) with its AdamW state (one
optimizer step of the run's own optimizer, so both moments exist) is put into the
``CheckpointedObjects`` that a default ``Trainer`` builds (its config, tokenizer and schedule) and
saved through ``training.background_save.CheckpointWrites``, the code every save of the trainer
runs, both ways in alternating order, each into its own run dir:

- at once (``ckpt.background=false``): ``save(background=False)``, the gather, every file
  written and fsynced, the rename and the pruning, all in the step;
- background (``ckpt.background=true``): ``save(background=True)`` returns once the state is
  copied to host memory (what the step waits for: the **blocking** time); ``wait()`` then
  waits for the thread's write, rename and pruning (the **write** time).

The reference (written once per run, by its first save) is written by a warm-up save of each
run dir before the timed ones. Times are the medians of the rounds. Last line:
``ratio: <background blocking ÷ at once>`` (the goal: ≤ 0.25).

    python bench/checkpoint_save.py [--rounds 3] [--threads N] [--dir DIR]
    python bench/checkpoint_save.py --quick   # a tiny model, one round (CI)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from astrai.config.compose import compose_train_config
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.training.background_save import CheckpointWrites
from astrai.training.checkpointing import CheckpointedObjects
from astrai.training.optim import clip_and_step
from astrai.training.run import Run
from astrai.training.state import TrainState

FULL = LlamaConfig(
    vocab_size=32_000,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=4,
    max_position_embeddings=2048,
)
QUICK = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2)


def build_parts(config: LlamaConfig, run_dir: Path) -> tuple[CheckpointedObjects, TrainState]:
    """A default Trainer's checkpoint parts with ``config``'s model, its copy as the reference,
    and the run's optimizer after one step on a random batch."""
    trainer = Run(compose_train_config(["debug=quick"]), run_dir / "tiny")
    torch.manual_seed(0)
    policy = LlamaForCausalLM(config)
    optimizer = trainer.parts.strategy.optimizer(policy.parameters())
    tokens = torch.randint(config.vocab_size, (2, 16))
    policy(tokens).logits.logsumexp(-1).mean().backward()
    clip_and_step(policy, optimizer, 1.0)
    parts = trainer.parts.checkpointed_objects(
        trainer.started.scheduler, trainer.started.critic_scheduler
    )
    parts = dataclasses.replace(
        parts, policy=policy, reference=copy.deepcopy(policy), optimizer=optimizer
    )
    state = trainer.started.state
    trainer.close()
    return parts, state


def time_saves(
    parts: CheckpointedObjects, state: TrainState, root: Path, rounds: int
) -> dict[str, list[float]]:
    """Seconds per round: ``at_once``, ``blocking`` (the background save's call) and
    ``write`` (from its return to the end of its write)."""
    dirs = {"at_once": root / "at_once", "background": root / "background"}
    runs = {mode: dataclasses.replace(parts, run_dir=path) for mode, path in dirs.items()}
    writes = CheckpointWrites()
    for run in runs.values():  # the reference, written by each run's first save
        writes.save(run, dataclasses.replace(state, step=0), background=False)
    times: dict[str, list[float]] = {"at_once": [], "blocking": [], "write": []}
    for step in range(1, rounds + 1):
        at_step = dataclasses.replace(state, step=step)
        for mode in ("at_once", "background") if step % 2 else ("background", "at_once"):
            t0 = time.perf_counter()
            writes.save(runs[mode], at_step, background=mode == "background")
            t1 = time.perf_counter()
            writes.wait()
            t2 = time.perf_counter()
            if mode == "at_once":
                times["at_once"].append(t1 - t0)
            else:
                times["blocking"].append(t1 - t0)
                times["write"].append(t2 - t1)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="saves of each kind")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (a temp dir)")
    parser.add_argument("--quick", action="store_true", help="a tiny model: checks the script")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    config, rounds = (QUICK, 1) if args.quick else (FULL, args.rounds)
    root = Path(tempfile.mkdtemp(prefix="checkpoint_save-", dir=args.dir))
    try:
        parts, state = build_parts(config, root)
        params = sum(p.numel() for p in parts.policy.parameters())
        moments = sum(t.numel() for s in parts.optimizer.state.values() for t in s.values())
        print(f"model: {params:,} parameters ({params / 1e6:.1f}M), AdamW state {moments:,} values")
        print(f"torch threads {torch.get_num_threads()}, {rounds} round(s), writing under {root}")
        times = time_saves(parts, state, root, rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(f"{name:>9}: median {median[name]:.3f} s  ({', '.join(f'{v:.3f}' for v in values)})")
    print(f"background total (blocking + write): {median['blocking'] + median['write']:.3f} s")
    print(f"ratio: {median['blocking'] / median['at_once']:.3f}")


if __name__ == "__main__":
    main()
