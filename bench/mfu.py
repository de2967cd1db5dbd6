"""The update's model FLOPs utilization (``perf/mfu``) at the shapes researchers compare.

One update step as the trainer takes it (the response tokens' logprobs through
``models.scoring.response_logprobs``, a policy-gradient-shaped loss, backward, AdamW) on
Qwen3-0.6B, Qwen3-1.7B and Qwen2.5-1.5B at their published ``config.json`` shapes (random
weights; ``bench/model_shapes.py``), timed after one warm-up step. Its model FLOPs are
``models.flops``'s count (6·N per trained token plus attention, as prime-rl and TRL count them)
and the peak is ``training.device_peak``'s (a datasheet's on a known CUDA part, a measured
matmul's on the CPU): the numbers compare with prime-rl's 11.1% at Qwen3-0.6B (one H100,
16k-token sequences) and TRL's 9.0% at Qwen3-1.7B only as far as the shapes agree.

On the CPU the layers are cut (``--layers``, default 1; the output head stays whole, so it
dominates the count) to fit; ``make gpu-check``'s ``mfu`` check runs the full models on CUDA.

    .venv/bin/python bench/mfu.py [--quick] [--layers N] [--rows R] [--seq T]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from astrai.models.flops import training_flops
from astrai.models.hf_config import llama_config_from_hf
from astrai.models.llama import LlamaForCausalLM
from astrai.models.precision import autocast, compute_dtype
from astrai.models.scoring import response_logprobs
from astrai.training.device_peak import device_peak

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_shapes import MODELS  # noqa: E402  (bench/model_shapes.py: the published shapes)

SHAPES = ("qwen3-0.6b", "qwen3-1.7b", "qwen2.5-1.5b")


@dataclass
class MfuRow:
    """One shape's measured update: ``seconds`` per step over ``rows`` × ``seq`` tokens."""

    model: str
    layers: int
    rows: int
    seq: int
    precision: str
    seconds: float
    flops: float
    peak_flops: float
    peak_source: str

    @property
    def mfu(self) -> float:
        return self.flops / self.seconds / self.peak_flops

    @property
    def tokens_per_s(self) -> float:
        return self.rows * self.seq / self.seconds

    def markdown(self) -> str:
        return (
            f"| {self.model} | {self.layers} | {self.rows} × {self.seq} | {self.precision} |"
            f" {self.tokens_per_s:,.0f} | {self.flops / self.seconds / 1e12:.3g} |"
            f" {self.peak_flops / 1e12:.3g} ({self.peak_source}) | {100 * self.mfu:.1f}% |"
        )


HEADER = (
    "| model | layers | rows × tokens | precision | tokens/s | TFLOP/s | peak TFLOP/s | MFU |\n"
    "|---|---|---|---|---|---|---|---|"
)


def measure(
    name: str,
    layers: int | None,
    rows: int,
    seq: int,
    device: torch.device,
    precision: str,
    steps: int = 2,
) -> MfuRow:
    """Time ``steps`` update steps (after one warm-up) of ``name`` at ``layers`` layers (None:
    all) on ``rows`` sequences of ``seq`` tokens, half prompt and half response."""
    hf = dict(MODELS[name])
    if layers is not None:
        hf["num_hidden_layers"] = layers
    config = llama_config_from_hf(hf)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device.type == "cuda")
    prompt_len = seq // 2
    ids = torch.randint(0, config.vocab_size, (rows, seq), device=device)
    mask = torch.ones(rows, seq, dtype=torch.bool, device=device)
    batch = (ids[:, :prompt_len], mask[:, :prompt_len], ids[:, prompt_len:], mask[:, prompt_len:])

    def step() -> None:
        with autocast(device, precision):
            logprobs, _ = response_logprobs(model, *batch)
        (-logprobs.mean()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # kernels chosen, optimizer state allocated
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - start) / steps
    peak = device_peak(device, compute_dtype(precision, torch.float32))
    flops = training_flops(config, [seq] * rows)
    return MfuRow(
        name, config.num_hidden_layers, rows, seq, precision, seconds, flops,
        peak.flops_per_s, peak.source,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one shape, tiny: CI's smoke run")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--layers", type=int, help="layers kept (default: all on CUDA, 1 on CPU)")
    parser.add_argument("--rows", type=int, help="sequences per step (default 4 CUDA, 2 CPU)")
    parser.add_argument("--seq", type=int, help="tokens per sequence (default 2048 CUDA, 128 CPU)")
    parser.add_argument("--precision", choices=("bf16", "fp32"), help="default bf16 CUDA, fp32 CPU")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    layers = args.layers if args.layers is not None else (None if cuda else 1)
    rows = args.rows or (1 if args.quick else 4 if cuda else 2)
    seq = args.seq or (16 if args.quick else 2048 if cuda else 128)
    precision = args.precision or ("bf16" if cuda else "fp32")
    names = ["qwen3-0.6b"] if args.quick else list(SHAPES)
    print(HEADER)
    for name in names:
        row = measure(name, layers, rows, seq, device, precision, steps=1 if args.quick else 2)
        print(row.markdown(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
