"""Sampling throughput: the KV-cache sampler vs naive full recompute, measured side by side.

Same tiny model, same prompts, same number of new tokens (EOS disabled so every row generates
all of them). Prints tokens/s of each and, on the last line, ``ratio: <kv ÷ recompute>``.

    python bench/rollout.py [--batch 256] [--new-tokens 32] [--repeats 3]
    python bench/rollout.py --quick   # seconds: the script works (CI); its numbers mean nothing
"""

from __future__ import annotations

import argparse
import time

import torch

from astrai.models.llama import LlamaForCausalLM
from astrai.models.presets import load_model_preset
from astrai.rollout.engines.sampler import SamplingConfig, generate


def tokens_per_second(
    model: LlamaForCausalLM,
    ids: torch.Tensor,
    mask: torch.Tensor,
    new_tokens: int,
    cache: bool,
    repeats: int,
) -> float:
    cfg = SamplingConfig(max_new_tokens=new_tokens, temperature=1.0)
    best = float("inf")
    for r in range(repeats):
        generator = torch.Generator().manual_seed(r)
        start = time.perf_counter()
        out = generate(
            model, ids, mask, cfg, eos_id=-1, pad_id=0, generator=generator, use_cache=cache
        )
        best = min(best, time.perf_counter() - start)
        assert out.response_ids.shape == (ids.shape[0], new_tokens)
    return ids.shape[0] * new_tokens / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="tiny", help="preset under conf/model/")
    parser.add_argument("--quick", action="store_true", help="a tiny workload: checks the script")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.new_tokens, args.repeats = 8, 4, 1
    torch.manual_seed(0)
    config = load_model_preset(args.model)
    config.max_position_embeddings = max(
        config.max_position_embeddings, args.prompt_len + args.new_tokens
    )
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(3, config.vocab_size, (args.batch, args.prompt_len))
    mask = torch.ones_like(ids, dtype=torch.bool)
    print(
        f"model: {model.num_parameters():,} parameters, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"workload: {args.batch} sequences x {args.new_tokens} new tokens, prompt {args.prompt_len}"
    )
    tokens_per_second(model, ids, mask, 4, True, 1)  # warm-up
    kv = tokens_per_second(model, ids, mask, args.new_tokens, True, args.repeats)
    full = tokens_per_second(model, ids, mask, args.new_tokens, False, args.repeats)
    print(f"kv-cache:  {kv:,.0f} tokens/s")
    print(f"recompute: {full:,.0f} tokens/s")
    print(f"ratio: {kv / full:.2f}")


if __name__ == "__main__":
    main()
