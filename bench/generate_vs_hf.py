"""Generation throughput: astrai's KV-cache sampler vs Hugging Face transformers' ``generate``.

Both models share one random-init Llama config and the same weights (astrai's state dict loaded
into ``transformers.LlamaForCausalLM``; the parameter names are identical). Both decode the same
batch of left-padded prompts of varying length for the same number of new tokens, with EOS
disabled so every row generates all of them, greedy and sampled at temperature 1 (no top-k /
top-p). Runs are interleaved so machine noise hits both; tokens/s is ``batch × new tokens`` over
the best wall time of ``--repeats`` runs after a warm-up (noise from other processes only ever
adds time). Prints a table per config, the ratio astrai ÷ transformers, and whether the greedy
token ids agree (they should: same weights, same arithmetic up to float rounding).

    .venv/bin/python bench/generate_vs_hf.py [--config tiny|small|both] [--threads N]
    .venv/bin/python bench/generate_vs_hf.py --quick   # seconds: checks the script (CI)

transformers is an optional extra (``pip install -e ".[hf]"``), needed only by this bench.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch

from astrai.models.hf_config import hf_config_from_llama
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.presets import load_model_preset
from astrai.rollout.engines.sampler import SamplingConfig, generate

PAD_ID = 0


def build_models(config: LlamaConfig) -> tuple[LlamaForCausalLM, torch.nn.Module]:
    """astrai's model and a ``transformers.LlamaForCausalLM`` holding the same weights."""
    import transformers

    ours = LlamaForCausalLM(config).eval()
    # the config astrai's export writes; no BOS/EOS: every row generates every new token
    hf_config = transformers.LlamaConfig.from_dict(
        hf_config_from_llama(config, special_ids={"pad_token_id": PAD_ID})
    )
    hf_config.bos_token_id = hf_config.eos_token_id = None
    theirs = transformers.LlamaForCausalLM(hf_config).eval()
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    # HF may not list the tied lm_head among its state-dict keys; nothing else may differ
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    assert torch.equal(theirs.lm_head.weight, ours.lm_head.weight)
    return ours, theirs


def make_prompts(
    batch: int, min_len: int, max_len: int, vocab: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` left-padded random prompts with lengths in ``[min_len, max_len]``."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (batch,), generator=g)
    ids = torch.randint(3, vocab, (batch, max_len), generator=g)
    mask = torch.arange(max_len)[None, :] >= (max_len - lengths)[:, None]
    return ids.masked_fill(~mask, PAD_ID), mask


def astrai_runner(
    model: LlamaForCausalLM, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int, greedy: bool
) -> Callable[[int], torch.Tensor]:
    cfg = SamplingConfig(max_new_tokens=new_tokens, temperature=0.0 if greedy else 1.0)

    def run(seed: int) -> torch.Tensor:
        gen = generate(
            model, ids, mask, cfg, eos_id=-1, pad_id=PAD_ID,
            generator=torch.Generator().manual_seed(seed),
        )  # fmt: skip
        return gen.response_ids

    return run


def hf_runner(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int, greedy: bool
) -> Callable[[int], torch.Tensor]:
    sampling = {} if greedy else {"temperature": 1.0, "top_k": None, "top_p": None}

    def run(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask.long(),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=not greedy,
                eos_token_id=None,
                pad_token_id=PAD_ID,
                use_cache=True,
                **sampling,
            )
        return out[:, ids.shape[1] :]

    return run


def best_tokens_per_second(
    runners: dict[str, Callable[[int], torch.Tensor]], tokens: int, repeats: int
) -> dict[str, float]:
    """Warm each runner up once, then time them interleaved; ``tokens / best seconds``."""
    for run in runners.values():
        run(0)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for r in range(repeats):
        for name, run in runners.items():
            start = time.perf_counter()
            out = run(r + 1)
            times[name].append(time.perf_counter() - start)
            assert out.numel() == tokens, (name, out.shape)
    return {name: tokens / min(ts) for name, ts in times.items()}


def bench_config(name: str, args: argparse.Namespace) -> None:
    config = load_model_preset(name)
    # both models must cover prompt + response, or HF warns
    config.max_position_embeddings = max(
        config.max_position_embeddings, 128, args.max_prompt + args.new_tokens
    )
    torch.manual_seed(0)
    ours, theirs = build_models(config)
    ids, mask = make_prompts(
        args.batch, args.min_prompt, args.max_prompt, config.vocab_size, seed=0
    )
    tokens = args.batch * args.new_tokens
    print(
        f"\n== {name}: hidden {config.hidden_size}, {config.num_hidden_layers} layer(s), "
        f"{config.num_attention_heads}/{config.num_key_value_heads} heads, "
        f"{ours.num_parameters():,} parameters"
    )
    print(f"{'mode':<10}{'astrai tok/s':>14}{'hf tok/s':>12}{'ratio':>8}")
    for mode in ("greedy", "sample"):
        greedy = mode == "greedy"
        runners = {
            "astrai": astrai_runner(ours, ids, mask, args.new_tokens, greedy),
            "hf": hf_runner(theirs, ids, mask, args.new_tokens, greedy),
        }
        tps = best_tokens_per_second(runners, tokens, args.repeats)
        ratio = tps["astrai"] / tps["hf"]
        print(f"{mode:<10}{tps['astrai']:>14,.0f}{tps['hf']:>12,.0f}{ratio:>7.2f}x")
        if greedy:
            same = torch.equal(runners["astrai"](0), runners["hf"](0))
            print(f"{'':<10}greedy token ids identical: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=["tiny", "small", "both"], default="both")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--min-prompt", type=int, default=8)
    parser.add_argument("--max-prompt", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="a tiny workload: checks the script")
    args = parser.parse_args()
    if args.quick:
        args.config, args.batch, args.new_tokens, args.repeats = "tiny", 4, 4, 1
    try:
        import transformers
    except ImportError:
        sys.exit('bench/generate_vs_hf.py needs transformers: pip install -e ".[hf]"')
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"workload: {args.batch} sequences x {args.new_tokens} new tokens, left-padded prompts "
        f"of {args.min_prompt}-{args.max_prompt} tokens, best of {args.repeats} after a warm-up"
    )
    for name in ("tiny", "small") if args.config == "both" else (args.config,):
        bench_config(name, args)


if __name__ == "__main__":
    main()
