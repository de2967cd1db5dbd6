"""Batched autoregressive sampling with a KV cache (and a naive full-recompute reference).

Behaviour logprobs are ``log_softmax(logits / temperature)`` of the sampled token over the *whole*
vocabulary: exactly the distribution the trainer re-scores (see ``scoring.py``), so the importance
ratio starts at 1. Top-k / top-p only restrict which tokens may be drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from astrai.distributed import all_reduce_max
from astrai.models.llama import LlamaForCausalLM


@dataclass
class SamplingConfig:
    """How responses are drawn. ``temperature == 0`` means greedy."""

    max_new_tokens: int = 8
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off


@dataclass
class Generation:
    """``response_ids [N, R]`` (right-padded), ``response_mask [N, R]`` (True up to and including
    EOS), behaviour ``logprobs [N, R]`` (0 at padding)."""

    response_ids: Tensor
    response_mask: Tensor
    logprobs: Tensor


def scaled_logits(logits: Tensor, temperature: float) -> Tensor:
    """Temperature scaling shared by sampler and trainer; greedy (0) scores at temperature 1."""
    return logits / temperature if temperature > 0 else logits


def _filter_logits(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """Mask ``[N, V]`` logits outside the top-k / nucleus top-p set with -inf."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the mass before it already reaches top_p (the first always stays)
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _choose(logits: Tensor, cfg: SamplingConfig, generator: torch.Generator | None) -> Tensor:
    """``[N, V]`` temperature-scaled logits -> ``[N]`` token ids."""
    if cfg.temperature <= 0:
        return logits.argmax(-1)
    probs = _filter_logits(logits, cfg.top_k, cfg.top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: LlamaForCausalLM,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    cfg: SamplingConfig,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    lockstep: bool = False,
) -> Generation:
    """Sample up to ``cfg.max_new_tokens`` tokens after left-padded prompts.

    Args:
        prompt_ids: ``[N, P]`` left-padded prompt tokens.
        prompt_mask: ``[N, P]`` bool, True on real prompt tokens.
        use_cache: False recomputes the whole sequence every step (reference/benchmark path).
        lockstep: stop early only when every rank's rows are finished. A sharded (FSDP) model
            gathers its weights in every forward, a collective all ranks must join.

    Returns:
        A ``Generation``; rows stop at EOS, which is kept in the response.
    """
    n, p = prompt_ids.shape
    max_new = cfg.max_new_tokens
    device = prompt_ids.device
    tokens = torch.full((n, max_new), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros(n, max_new, device=device)
    response_mask = torch.zeros(n, max_new, dtype=torch.bool, device=device)
    attention_mask = prompt_mask.bool()
    cache = model.new_cache(n, p + max_new) if use_cache else None
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    step_input, seq = prompt_ids, prompt_ids
    for t in range(max_new):
        if use_cache:
            out = model(step_input, attention_mask=attention_mask, cache=cache)
        else:
            out = model(seq, attention_mask=attention_mask)
        logits = scaled_logits(out.logits[:, -1].float(), cfg.temperature)
        next_token = _choose(logits, cfg, generator)
        next_token = torch.where(finished, torch.full_like(next_token, pad_id), next_token)
        token_logprob = logits.log_softmax(-1).gather(-1, next_token[:, None]).squeeze(-1)
        tokens[:, t] = next_token
        logprobs[:, t] = torch.where(finished, 0.0, token_logprob)
        response_mask[:, t] = ~finished
        finished = finished | (next_token == eos_id)
        done = bool(finished.all())
        if lockstep:
            done = all_reduce_max(0.0 if done else 1.0) == 0.0
        if done:
            break
        # finished rows keep decoding (batched) but their new tokens are masked out of attention
        attention_mask = torch.cat([attention_mask, ~finished[:, None]], dim=1)
        step_input = next_token[:, None]
        seq = torch.cat([seq, step_input], dim=1)
    length = int(response_mask.sum(-1).max().item()) if n else 0
    return Generation(tokens[:, :length], response_mask[:, :length], logprobs[:, :length])
