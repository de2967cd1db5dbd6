"""Sampled tokens/s: astrai's torch sampler vs vLLM's CPU build, side by side in one run.

Both engines serve the same random-init weights (float32) through astrai's ``Engine`` interface
(``rollout.engines.engine.TorchEngine`` and ``rollout.engines.seeded_vllm.SeededVLLM`` over
``rollout.engines.in_process_vllm``, as the trainer calls them): the same left-padded prompts, G
samples per prompt, temperature 1 and an empty stop set, so every response runs to ``--new-tokens``
(vLLM refuses a stop id outside the vocabulary). Each repetition draws fresh prompts, the same for
both engines, so vLLM's prefix cache cannot reuse an earlier repetition's prompts. Timed interleaved
after one warm-up, tokens/s = prompts x G x new tokens over the best of ``--repeats``. vLLM's
engine start (policy export + ``vllm.LLM``) and one ``sync_weights`` are timed on their own. Two
shapes:

- ``tiny``: ``model=tiny`` with 2 attention heads of 32 and 1 KV head (vLLM's CPU attention has
  no kernel for ``tiny``'s head size 16).
- ``smollm2``: SmolLM2-135M's shapes (hidden 576, 30 layers, 9/3 heads of 64, vocab 49152,
  tied), random weights.

Prints a table and the ratio vLLM / torch per shape; the last line is ``ratio: <vllm / torch>``
at the last shape run (SmolLM2's by default).

    .venv-vllm/bin/python bench/engine.py [--shape tiny|smollm2|both] [--repeats 3]
    .venv-vllm/bin/python bench/engine.py --quick   # seconds: checks the script (CI's vLLM lane)

Needs vLLM (``make install-vllm`` builds ``.venv-vllm``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.presets import load_model_preset
from astrai.models.tokenizer import CharTokenizer
from astrai.models.weights import named_weights
from astrai.rollout.engines.engine import Engine, torch_engine
from astrai.rollout.engines.sampler import Generation, SamplingConfig
from astrai.rollout.engines.seeded_vllm import VLLM_INSTALL, SeededVLLM

PAD_ID = 0
NO_STOP: tuple[int, ...] = ()  # every response runs to max_new_tokens


@dataclass
class Workload:
    """``prompts`` x ``group`` responses of ``new_tokens`` each, after prompts of
    ``min_prompt``..``max_prompt`` tokens."""

    prompts: int
    group: int
    new_tokens: int
    min_prompt: int = 8
    max_prompt: int = 16

    @property
    def tokens(self) -> int:
        return self.prompts * self.group * self.new_tokens

    def __str__(self) -> str:
        return f"{self.prompts}x{self.group}x{self.new_tokens}"


@dataclass
class Result:
    shape: str
    parameters: int
    workload: Workload
    threads: int
    torch_tps: float
    vllm_tps: float
    start_s: float
    sync_s: float

    @property
    def ratio(self) -> float:
        return self.vllm_tps / self.torch_tps


def shape_config(name: str) -> LlamaConfig:
    """The model config of a bench shape (see the module docstring)."""
    if name == "tiny":
        config = load_model_preset("tiny")
        config.num_attention_heads, config.num_key_value_heads = 2, 1
        config.head_dim = config.hidden_size // 2
        return config
    # SmolLM2-135M's config.json, its shapes and positions
    return LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    )


def make_prompts(work: Workload, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``work.prompts`` left-padded random prompts (ids from 3: no special tokens)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(work.min_prompt, work.max_prompt + 1, (work.prompts,), generator=g)
    ids = torch.randint(3, vocab, (work.prompts, work.max_prompt), generator=g)
    mask = torch.arange(work.max_prompt)[None, :] >= (work.max_prompt - lengths)[:, None]
    return ids.masked_fill(~mask, PAD_ID), mask


def engine_runner(
    engine: Engine, policy: LlamaForCausalLM, work: Workload, sampling: SamplingConfig
) -> Callable[[int], Generation]:
    """One repetition: the prompts of ``seed``, sampled as a rollout samples them."""
    vocab = policy.config.vocab_size

    def run(seed: int) -> Generation:
        ids, mask = make_prompts(work, vocab, seed)
        return engine.sample(
            ids, mask, work.group, sampling, NO_STOP, generator=torch.Generator().manual_seed(seed)
        )

    return run


def best_seconds(
    runners: dict[str, Callable[[int], Any]], repeats: int, check: Callable[[str, Any], None]
) -> dict[str, float]:
    """Warm each runner up once, then time them interleaved (repetition ``r`` draws from seed
    ``r + 1``), each output ``check``-ed; the best seconds of each runner."""
    for run in runners.values():
        run(0)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for r in range(repeats):
        for name, run in runners.items():
            start = time.perf_counter()
            out = run(r + 1)
            times[name].append(time.perf_counter() - start)
            check(name, out)
    return {name: min(ts) for name, ts in times.items()}


def best_tokens_per_second(
    runners: dict[str, Callable[[int], Generation]], work: Workload, repeats: int
) -> dict[str, float]:
    """``best_seconds`` as ``tokens / best seconds``; every response ran to the limit."""
    expected = (work.prompts * work.group, work.new_tokens)

    def check(name: str, out: Generation) -> None:
        assert out.response_ids.shape == expected, (name, out.response_ids.shape)
        assert bool(out.response_mask.all()), f"{name}: a response stopped early"

    best = best_seconds(runners, repeats, check)
    return {name: work.tokens / seconds for name, seconds in best.items()}


def bench_shape(name: str, work: Workload, repeats: int, kv_cache_gib: int) -> Result:
    from astrai.rollout.engines.vllm_settings import VLLMEngineConfig

    config = shape_config(name)
    torch.manual_seed(0)
    policy = LlamaForCausalLM(config).eval()
    sampling = SamplingConfig(max_new_tokens=work.new_tokens, temperature=1.0)
    print(f"\n== {name}: {policy.num_parameters():,} parameters, workload {work}", flush=True)
    start = time.perf_counter()
    vllm = SeededVLLM(VLLMEngineConfig(kv_cache_space_gib=kv_cache_gib), policy, CharTokenizer())
    start_s = time.perf_counter() - start
    threads = torch.get_num_threads()  # vLLM's CPU worker has bound the OpenMP threads
    try:
        with torch.no_grad():  # a changed policy, so the sync moves new values
            policy.model.norm.weight.mul_(1.01)
        sync_s = vllm.sync_weights(named_weights(policy))
        runners = {
            "torch": engine_runner(torch_engine(policy, CharTokenizer()), policy, work, sampling),
            "vllm": engine_runner(vllm, policy, work, sampling),
        }
        tps = best_tokens_per_second(runners, work, repeats)
    finally:
        vllm.close()
    return Result(
        name, policy.num_parameters(), work, threads,
        tps["torch"], tps["vllm"], start_s, sync_s,
    )  # fmt: skip


def print_table(results: list[Result]) -> None:
    print(
        f"\n{'shape':<9}{'params':>13}{'workload':>10}{'threads':>8}{'torch tok/s':>13}"
        f"{'vllm tok/s':>12}{'vllm/torch':>11}{'start s':>9}{'sync s':>8}"
    )
    for r in results:
        print(
            f"{r.shape:<9}{r.parameters:>13,}{str(r.workload):>10}{r.threads:>8}"
            f"{r.torch_tps:>13,.0f}{r.vllm_tps:>12,.0f}{r.ratio:>11.3f}"
            f"{r.start_s:>9.2f}{r.sync_s:>8.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["tiny", "smollm2", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads before vLLM binds its own"
    )
    parser.add_argument("--kv-cache-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE")
    parser.add_argument("--quick", action="store_true", help="a tiny workload: checks the script")
    args = parser.parse_args()
    workloads = {"tiny": Workload(16, 8, 16), "smollm2": Workload(8, 8, 32)}
    if args.quick:
        args.shape, args.repeats = "tiny", 1
        workloads["tiny"] = Workload(2, 2, 4, min_prompt=3, max_prompt=6)
    if importlib.util.find_spec("vllm") is None:
        print(f"bench/engine.py needs vLLM: {VLLM_INSTALL}", file=sys.stderr)
        sys.exit(2)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    import vllm

    import_s = time.perf_counter() - start
    print(
        f"torch {torch.__version__}, vllm {vllm.__version__} (import {import_s:.1f} s), "
        f"{torch.get_num_threads()} torch threads before vLLM starts; fp32, temperature 1, "
        f"best of {args.repeats} after a warm-up",
        flush=True,
    )
    shapes = ("tiny", "smollm2") if args.shape == "both" else (args.shape,)
    results = [bench_shape(s, workloads[s], args.repeats, args.kv_cache_gib) for s in shapes]
    print_table(results)
    print(
        "workload: prompts x samples per prompt x new tokens; threads: torch's after vLLM's "
        "start (its CPU worker binds the process's OpenMP threads); start: policy export + "
        "vllm.LLM; sync: one sync_weights"
    )
    print(f"ratio: {results[-1].ratio:.3f}")


if __name__ == "__main__":
    main()
