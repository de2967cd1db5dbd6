"""Peak memory of one update: the whole minibatch at once vs micro-batches (and bf16).

One GRPO rollout is sampled once (fixed seed, random-init ``model=small``, responses padded to
``--new-tokens``), prepared (reference logprobs, advantages) and saved with ``torch.save``. Each
setting then runs in a fresh subprocess that builds the same trainer, loads that rollout and
runs the step's ``update`` on it once: one optimizer step over one minibatch of every sequence, so
only the update differs between settings. The update runs over the padded ``[sequences,
prompt + --new-tokens]`` tensors, and with 128 samples of a random-init policy at least one runs
to ``--new-tokens`` without emitting EOS, so at this shape the update's memory is activations
(128 sequences × ~100 positions through 4 layers), not the 2.9M weights and their Adam state.

Peak memory of the update, in MB (10^6 bytes):
- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus the memory
  allocated just before the update.
- CPU (Linux): the process's peak RSS. Writing ``5`` to ``/proc/self/clear_refs`` resets the
  high-water mark ``VmHWM`` to the current RSS right before the update; ``VmHWM`` after it, minus
  the RSS before, is the peak the update added. Each child runs with
  ``MALLOC_MMAP_THRESHOLD_=65536`` so that glibc returns large freed blocks to the system at once
  (RSS follows live memory) instead of reusing memory freed before the measurement.

Prints the settings, one row per setting (peak MB, seconds) and, last,
``peak_ratio: <micro-batched ÷ whole>`` for the fp32 pair. One intra-op thread by default: the
peaks do not depend on it, and on a shared 2-core machine two threads contending with another
process run many times slower (the seconds are only a rough guide).

    .venv/bin/python bench/memory.py [--prompts 16] [--group 8] [--new-tokens 96] [--micro 16]
    .venv/bin/python bench/memory.py --quick   # seconds: checks the script (CI)
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from astrai.config.compose import compose_train_config as compose_config
from astrai.rollout.rollout import Rollout
from astrai.training.run import Run

# (name, overrides): the first two define peak_ratio
SETTINGS: list[tuple[str, list[str]]] = [
    ("fp32 whole minibatch", ["train_type.micro_batch_size=null"]),
    ("fp32 micro-batched", ["train_type.micro_batch_size={micro}"]),
    ("bf16 whole minibatch", ["train_type.micro_batch_size=null", "infra.precision=bf16"]),
    ("bf16 micro-batched", ["train_type.micro_batch_size={micro}", "infra.precision=bf16"]),
    (
        "fp32 grad checkpointing",
        ["train_type.micro_batch_size=null", "model.gradient_checkpointing=true"],
    ),
]


def base_overrides(args: argparse.Namespace) -> list[str]:
    """One GRPO update = one optimizer step over the whole rollout (one minibatch)."""
    return [
        "model=small",
        f"infra.device={args.device}",
        f"train_type.prompts_per_step={args.prompts}",
        f"train_type.group_size={args.group}",
        f"train_type.sampling.max_new_tokens={args.new_tokens}",
        "train_type.minibatches=1",
        "train_type.ppo_epochs=1",
        "trainer.total_steps=1",
        "trainer.progress_bar=false",
        "ckpt.resume=null",
        "seed=0",
    ]


def make_rollout(args: argparse.Namespace, path: Path) -> tuple[int, int, int]:
    """Sample and prepare the shared rollout; save its fields. Returns (sequences, padded
    response length, response tokens)."""
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Run(compose_config(base_overrides(args)), run_dir)
        rollout = trainer.trainer.rollout()
        trainer.trainer.prepare(rollout)
        trainer.started.logger.close()
    torch.save(dataclasses.asdict(rollout), path)
    rows = rollout.response_ids.shape[0] * rollout.response_ids.shape[1]
    return rows, rollout.response_ids.shape[-1], int(rollout.response_mask.sum())


def status_kb(key: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``)."""
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    assert match is not None, key
    return int(match.group(1))


def measure(args: argparse.Namespace, overrides: list[str], rollout_path: Path) -> dict:
    """In a fresh process: the same trainer, the saved rollout, one ``update``; its peak."""
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Run(compose_config([*base_overrides(args), *overrides]), run_dir)
        fields = torch.load(rollout_path, map_location=trainer.parts.device)
        rollout = Rollout(**fields)
        cuda = trainer.parts.device.type == "cuda"
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        else:
            before = status_kb("VmRSS") * 1024
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
        start = time.perf_counter()
        metrics = trainer.trainer.update(rollout)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() if cuda else status_kb("VmHWM") * 1024
        trainer.started.logger.close()
    return {
        "peak_mb": (peak - before) / 1e6,
        "seconds": seconds,
        "loss": metrics["loss/total"],
        "device": str(trainer.parts.device),
    }


def run_setting(args: argparse.Namespace, overrides: list[str], rollout_path: Path) -> dict:
    command = [sys.executable, __file__, "--measure", json.dumps(overrides)]
    command += ["--rollout", str(rollout_path), *forwarded(args)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        sys.exit(f"setting {overrides} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def forwarded(args: argparse.Namespace) -> list[str]:
    """The shape arguments, passed on to each child unchanged."""
    return [
        f"--device={args.device}",
        f"--prompts={args.prompts}",
        f"--group={args.group}",
        f"--new-tokens={args.new_tokens}",
        f"--micro={args.micro}",
        f"--threads={args.threads}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts in the rollout (B)")
    parser.add_argument("--group", type=int, default=8, help="responses per prompt (G)")
    parser.add_argument("--new-tokens", type=int, default=96, help="sampling.max_new_tokens")
    parser.add_argument("--micro", type=int, default=16, help="micro_batch_size (sequences)")
    parser.add_argument("--device", default="auto", help="infra.device: auto | cpu | cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # child: JSON list of overrides
    parser.add_argument("--rollout", help=argparse.SUPPRESS)  # child: the saved rollout
    parser.add_argument("--quick", action="store_true", help="a tiny workload: checks the script")
    args = parser.parse_args()
    if args.quick:  # the children get the shape through ``forwarded``
        args.prompts, args.group, args.new_tokens, args.micro = 2, 2, 8, 2
    torch.set_num_threads(args.threads)
    if args.measure is not None:
        print(json.dumps(measure(args, json.loads(args.measure), Path(args.rollout))))
        return
    if not torch.cuda.is_available() or args.device == "cpu":
        assert Path("/proc/self/clear_refs").exists(), "CPU peak memory needs Linux's /proc"
    with tempfile.TemporaryDirectory() as tmp:
        rollout_path = Path(tmp) / "rollout.pt"
        rows, length, tokens = make_rollout(args, rollout_path)
        print(
            f"settings: model=small (random init), GRPO, one update = one optimizer step over "
            f"{rows} sequences ({args.prompts} prompts x {args.group}), responses padded to "
            f"{length} tokens ({tokens / rows:.1f} real on average), micro_batch_size="
            f"{args.micro}; torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s)"
        )
        results = []
        for name, overrides in SETTINGS:
            filled = [o.format(micro=args.micro) for o in overrides]
            results.append((name, run_setting(args, filled, rollout_path)))
    print(f"device: {results[0][1]['device']}; peak = memory the update added, MB")
    print(f"{'setting':<26} {'peak MB':>9} {'seconds':>8} {'loss':>10}")
    for name, r in results:
        print(f"{name:<26} {r['peak_mb']:>9.1f} {r['seconds']:>8.2f} {r['loss']:>10.5f}")
    print(f"peak_ratio: {results[1][1]['peak_mb'] / results[0][1]['peak_mb']:.3f}")


if __name__ == "__main__":
    main()
