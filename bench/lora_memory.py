"""Peak training memory with LoRA adapters vs full fine-tuning, GRPO and PPO, side by side.

Each setting runs in a fresh process: it builds the trainer of ``model=smollm2`` (SmolLM2-135M-
Instruct's real shapes and weights, ``make smollm2``) on the addition task and takes one RL step
(``train_step``: rollout, reference and critic passes, one epoch of optimizer steps, so AdamW's
state exists). Full fine-tuning holds the policy, its frozen reference copy, gradients and AdamW's
two moments over every weight (PPO: the same again for the critic); LoRA (rank 16, every decoder
linear) holds the base once, the reference as the same weights with the adapters off, the PPO
critic's own adapters and value head on the policy's frozen trunk, and gradients and AdamW state
for the adapters alone.

Peak memory, MB (10^6 bytes), of what the run holds and does:
- CPU (Linux): the process's RSS before the trainer is built (imports done) is the baseline. The
  high-water mark ``VmHWM`` is reset (``5`` into ``/proc/self/clear_refs``) once the trainer is
  built, so loading's transient copy of the weights file is not counted; the peak is ``VmHWM``
  after the step minus the baseline: the models, optimizer state and the step's activations.
  Children run with ``MALLOC_MMAP_THRESHOLD_=65536`` so freed blocks go back to the system.
- CUDA: ``torch.cuda.max_memory_allocated`` over the build and the step.

The last lines are ``grpo_peak_ratio lora/full R`` and ``ppo_peak_ratio lora/full R`` (the
issue's target: <= 0.5 for both).

    .venv/bin/python bench/lora_memory.py            # ~5 min on 2 cores
    .venv/bin/python bench/lora_memory.py --quick    # model=tiny: checks the script (CI)
"""

from __future__ import annotations

import argparse
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

from astrai.config.compose import compose_train_config
from astrai.training.run import Run

PPO = ["train_type=online_ppo", "critic=value_model"]
LORA = ["model.lora.rank=16", "model.lora.alpha=32", "model.lora.target_modules=all-linear"]
SETTINGS: list[tuple[str, list[str]]] = [
    ("grpo full", []),
    ("grpo lora", LORA),
    ("ppo full", PPO),
    ("ppo lora", [*PPO, *LORA]),
]


def base_overrides(quick: bool, device: str) -> list[str]:
    """One step of 16 responses (4 prompts x 4) of up to 32 tokens, in micro-batches of 4."""
    model = [] if quick else ["model=smollm2", "task=addition"]
    return [
        *model,
        f"infra.device={device}",
        "train_type.prompts_per_step=4",
        "train_type.group_size=4",
        "train_type.sampling.max_new_tokens=8"
        if quick
        else "train_type.sampling.max_new_tokens=32",
        "train_type.micro_batch_size=4",
        "train_type.minibatches=1",
        "train_type.ppo_epochs=1",
        "trainer.total_steps=1",
        "trainer.progress_bar=false",
        "logger.tensorboard=false",
        "ckpt.resume=null",
        "seed=0",
    ]


def status_kb(key: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``)."""
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    assert match is not None, key
    return int(match.group(1))


def measure(overrides: list[str]) -> dict:
    """In a fresh process: build the trainer, take one step; the peak over both."""
    cfg = compose_train_config(overrides)
    cuda = torch.cuda.is_available() and cfg.infra.device != "cpu"
    with tempfile.TemporaryDirectory() as run_dir:
        gc.collect()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        else:
            before = status_kb("VmRSS") * 1024
        trainer = Run(cfg, run_dir)
        built = torch.cuda.memory_allocated() if cuda else status_kb("VmRSS") * 1024
        if not cuda:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
        start = time.perf_counter()
        metrics = trainer.train_step()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() if cuda else status_kb("VmHWM") * 1024
        trainable = sum(p.numel() for p in trainer.parts.optimizer.param_groups[0]["params"])
        trainer.started.logger.close()
    return {
        "built_mb": (built - before) / 1e6,
        "peak_mb": (peak - before) / 1e6,
        "seconds": seconds,
        "trainable": trainable,
        "loss": metrics["loss/total"],
        "device": "cuda" if cuda else "cpu",
    }


def run_setting(overrides: list[str], threads: int) -> dict:
    command = [sys.executable, __file__, "--measure", json.dumps(overrides)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": str(threads)}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        sys.exit(f"setting {overrides} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="infra.device: auto | cpu | cuda")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="model=tiny: checks the script")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # child: JSON list of overrides
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(json.loads(args.measure))))
        return
    if not args.quick and not Path("models/smollm2/config.json").is_file():
        sys.exit("needs SmolLM2-135M-Instruct in models/smollm2: make smollm2")
    base = base_overrides(args.quick, args.device)
    results = {name: run_setting([*base, *extra], args.threads) for name, extra in SETTINGS}
    model = "model=tiny" if args.quick else "model=smollm2 (SmolLM2-135M-Instruct)"
    print(
        f"{model}, one RL step of 16 responses (4 prompts x 4), micro_batch_size 4; LoRA: rank "
        f"16, alpha 32, all-linear; device {results['grpo full']['device']}; torch "
        f"{torch.__version__}, {args.threads} thread(s)"
    )
    print(f"{'setting':<10} {'trainable':>12} {'built MB':>9} {'peak MB':>9} {'step s':>7}")
    for name, r in results.items():
        print(
            f"{name:<10} {r['trainable']:>12,} {r['built_mb']:>9.1f} {r['peak_mb']:>9.1f} "
            f"{r['seconds']:>7.1f}"
        )
    for algo in ("grpo", "ppo"):
        ratio = results[f"{algo} lora"]["peak_mb"] / results[f"{algo} full"]["peak_mb"]
        print(f"{algo}_peak_ratio lora/full {ratio:.3f}")


if __name__ == "__main__":
    main()
