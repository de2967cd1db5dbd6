"""SmolLM2-135M's shapes with random weights, for timing where the real weights cannot go.

``python bench/smollm2_shaped.py SOURCE OUT`` copies a converted SmolLM2 directory's config,
tokenizer and chat template (``SOURCE``, e.g. ``models/smollm2`` after ``make smollm2``, or just
those small files) into ``OUT`` and writes a ``model.safetensors`` of the same shapes drawn at
random (normal, std 0.02; norms 1). The converted weights are 538 MB; the small files are 4 MB,
so they travel to a machine the weights cannot reach (a lent GPU machine with a 64 MiB upload).
Then ``bench/gpu_check.py --smollm2-dir OUT`` times a step of the same size: the decode, update
and memory costs depend on the shapes only, except that a random policy rarely stops early, so
every response runs to ``max_new_tokens`` (the slowest case). ``--quick`` writes one decoder
layer (and a config.json that says so): it checks the script in seconds (CI).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


def shaped_weights(config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Hugging Face Llama parameter names -> random tensors of the shapes ``config`` gives."""
    gen = torch.Generator().manual_seed(seed)
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q_dim = config["num_attention_heads"] * head_dim
    kv_dim = config["num_key_value_heads"] * head_dim

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.02

    weights = {
        "model.embed_tokens.weight": normal(config["vocab_size"], hidden),
        "model.norm.weight": torch.ones(hidden),
    }
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        weights |= {
            layer + "self_attn.q_proj.weight": normal(q_dim, hidden),
            layer + "self_attn.k_proj.weight": normal(kv_dim, hidden),
            layer + "self_attn.v_proj.weight": normal(kv_dim, hidden),
            layer + "self_attn.o_proj.weight": normal(hidden, q_dim),
            layer + "mlp.gate_proj.weight": normal(inner, hidden),
            layer + "mlp.up_proj.weight": normal(inner, hidden),
            layer + "mlp.down_proj.weight": normal(hidden, inner),
            layer + "input_layernorm.weight": torch.ones(hidden),
            layer + "post_attention_layernorm.weight": torch.ones(hidden),
        }
    if not config.get("tie_word_embeddings", False):
        weights["lm_head.weight"] = normal(config["vocab_size"], hidden)
    return weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="config.json, tokenizer and chat template")
    parser.add_argument("out", type=Path, help="the model directory to write")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one decoder layer (config.json says so): checks the script",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.source.iterdir():
        if path.is_file() and path.name not in WEIGHT_FILES:
            shutil.copy(path, args.out / path.name)
    config = json.loads((args.source / "config.json").read_text())
    if args.quick:  # the written config must describe the written weights
        config["num_hidden_layers"] = 1
        (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    weights = shaped_weights(config)
    save_file(weights, str(args.out / "model.safetensors"), metadata={"format": "pt"})
    count = sum(t.numel() for t in weights.values()) / 1e6
    print(f"wrote {args.out}: {count:.1f}M random parameters in SmolLM2's shapes")


if __name__ == "__main__":
    main()
