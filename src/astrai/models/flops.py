"""Model FLOPs of a training pass, counted the way torchtitan and prime-rl count them for MFU.

Per token of a sequence of ``T`` tokens, a forward and backward pass costs
``6·N + 12·L·H·d·T``: ``N`` the weights of the matrix multiplies (every linear layer and the
output head; not the embedding table, a lookup), ``6`` = 2 (multiply-add) × 3 (forward, and the
backward's two products), and the attention scores and their weighted sum, ``2·2·H·d·T`` per
token and layer forward, ×3 again. Full ``T``, not ``T/2`` for a causal mask: the convention,
so that an MFU printed here compares with theirs (prime-rl's 11.1% at Qwen3-0.6B, TRL's 9.0% at
Qwen3-1.7B). It is a *model* count: astrai computes the head's logits for response tokens only,
and recomputes activations under gradient checkpointing, neither of which the count sees.
"""

from __future__ import annotations

from collections.abc import Iterable

from astrai.models.llama import LlamaConfig


def matmul_weights(config: LlamaConfig, head_outputs: int | None = None) -> int:
    """``N``: the weights of the matrix multiplies of one pass over a token; ``head_outputs``
    the output head's width (``vocab_size`` when None; 1 for a value model's head)."""
    head_dim = config.head_dim or config.hidden_size // config.num_attention_heads
    hidden = config.hidden_size
    query = config.num_attention_heads * head_dim
    key_value = config.num_key_value_heads * head_dim
    attention = hidden * query + 2 * hidden * key_value + query * hidden  # q, k, v, o
    mlp = 3 * hidden * config.intermediate_size  # gate, up, down
    head = hidden * (config.vocab_size if head_outputs is None else head_outputs)
    return config.num_hidden_layers * (attention + mlp) + head


def training_flops(
    config: LlamaConfig, lengths: Iterable[int], head_outputs: int | None = None
) -> float:
    """Model FLOPs of one forward and backward pass over sequences of ``lengths`` tokens each
    (a sequence of ``T`` tokens: ``T·(6·N + 12·L·H·d·T)``)."""
    n = matmul_weights(config, head_outputs)
    head_dim = config.head_dim or config.hidden_size // config.num_attention_heads
    attention = 12 * config.num_hidden_layers * config.num_attention_heads * head_dim
    return float(sum(t * (6 * n + attention * t) for t in lengths))
