"""Batched autoregressive sampling with a KV cache (and a naive full-recompute reference).

Behaviour logprobs are ``log_softmax(logits / temperature)`` of the sampled token over the *whole*
vocabulary: exactly the distribution the trainer re-scores (see ``scoring.py``), so the importance
ratio starts at 1. Top-k / top-p only restrict which tokens may be drawn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from astrai.distributed import all_reduce_max, is_fsdp
from astrai.models.decode import Decoder
from astrai.models.kv_cache import KVCache
from astrai.models.llama import LlamaForCausalLM
from astrai.models.precision import autocast, compute_dtype
from astrai.models.scoring import scaled_logits
from astrai.models.shared_prefix import prefill
from astrai.rollout.rollout import is_stop_token, stop_ids_on


@dataclass
class SamplingConfig:
    """How responses are drawn. ``temperature == 0`` means greedy.

    ``max_new_tokens`` has no default; the others default to "plain sampling", the values
    ``conf/sampling/default.yaml`` sets (a test keeps them equal). ``max_cache_tokens`` bounds
    the torch engine's memory, not the distribution: an engine with its own KV pool (vLLM)
    does not read it.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    # the torch engine's KV-cache tokens per sampling chunk (``models.pass_memory``): a
    # positive int, None (every row at once) or "auto" (from the device's memory)
    max_cache_tokens: Any = "auto"


@dataclass
class Generation:
    """``response_ids [N, R]`` (right-padded), ``response_mask [N, R]`` (True up to and including
    EOS), behaviour ``logprobs [N, R]`` (0 at padding)."""

    response_ids: Tensor
    response_mask: Tensor
    logprobs: Tensor


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
    # One draw from each row by inverting its CDF: the first token whose cumulative probability
    # exceeds u * total for one uniform u per row (torch.multinomial draws one per token, a
    # decoding step's largest single op on CPU at small sizes and a cost that grows with the
    # vocabulary). In float64, u * total < total, so a token of probability 0 (filtered out)
    # is never drawn: its cumulative value equals the one before it. Probabilities from a
    # softmax can only be invalid as NaN, whose rows the clamp keeps in range and the
    # logprobs then carry.
    cdf = probs.cumsum(-1, dtype=torch.float64)
    uniform = torch.rand(
        (probs.shape[0], 1), dtype=torch.float64, generator=generator, device=probs.device
    )
    drawn = torch.searchsorted(cdf, uniform.mul_(cdf[:, -1:]), right=True)
    return drawn.squeeze_(-1).clamp_max_(probs.shape[-1] - 1)


@torch.no_grad()
def generate(
    model: LlamaForCausalLM,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    cfg: SamplingConfig,
    eos_id: int | Sequence[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    lockstep: bool = False,
    precision: str = "fp32",
) -> Generation:
    """Sample up to ``cfg.max_new_tokens`` tokens after left-padded prompts, in ``precision``
    (``infra.precision``: ``models.precision``; its autocast and KV-cache dtype are opened here,
    whatever autocast the caller has on).

    Args:
        prompt_ids: ``[N, P]`` left-padded prompt tokens.
        prompt_mask: ``[N, P]`` bool, True on real prompt tokens.
        eos_id: the id that ends a response, or several (``Tokenizer.stop_ids``).
        use_cache: False recomputes the whole sequence every step (reference/benchmark path).
        lockstep: stop early only when every rank's rows are finished. A sharded (FSDP) model
            gathers its weights in every forward, a collective all ranks must join.

    Returns:
        A ``Generation``; rows stop at EOS (any of ``eos_id``), which is kept in the response.
    """
    # inference mode skips autograd's per-op bookkeeping that no_grad still pays (up to ~10% of
    # a CPU decoding step at small sizes), but FSDP must not allocate its unsharded weights as
    # inference tensors (and inference_mode(False) would turn grad mode back on)
    fsdp = is_fsdp(model)
    mode = contextlib.nullcontext() if fsdp else torch.inference_mode()
    with mode:
        # a sharded model gathers its weights only inside its modules' calls, which the fast
        # decode path skips
        fast = use_cache and not fsdp
        with autocast(prompt_ids.device, precision):
            gen = _sample(
                model, prompt_ids, prompt_mask, cfg, eos_id, pad_id, generator, use_cache, fast,
                lockstep, precision,
            )  # fmt: skip
    # clones made outside inference mode are ordinary tensors, fit for the trainer's autograd
    return Generation(gen.response_ids.clone(), gen.response_mask.clone(), gen.logprobs.clone())


def _sample(
    model: LlamaForCausalLM,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    cfg: SamplingConfig,
    eos_id: int | Sequence[int],
    pad_id: int,
    generator: torch.Generator | None,
    use_cache: bool,
    fast_decode: bool,
    lockstep: bool,
    precision: str,
) -> Generation:
    """The decoding loop of ``generate``; ``fast_decode``: the steps after the prompt may take
    the fast path (``Decoder``) where it applies."""
    n, p = prompt_ids.shape
    max_new = cfg.max_new_tokens
    device = prompt_ids.device
    # the whole run's attention mask (and, without a cache, its tokens), one column per step
    attention_mask = torch.zeros(n, p + max_new, dtype=torch.bool, device=device)
    attention_mask[:, :p] = prompt_mask
    seq = None if use_cache else torch.cat([prompt_ids, prompt_ids.new_zeros(n, max_new)], 1)
    cache: KVCache | None = None
    decoder: Decoder | None = None
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    stop = stop_ids_on(eos_id, device)  # once: a step only compares
    token_steps: list[Tensor] = []  # [N] per step
    logprob_steps: list[Tensor] = []  # [N, 1] per step
    step_input = prompt_ids  # the prompt, then one token per step
    for t in range(max_new):
        width = p + t
        if decoder is not None:  # after the prompt, where the fast path applies
            logits = decoder.step(step_input)
        elif use_cache and t == 0:  # the prompt: each distinct one once (GRPO's groups)
            dtype = compute_dtype(precision, model.lm_head.weight.dtype)
            cache, logits = prefill(model, prompt_ids, prompt_mask, p + max_new, dtype)
            if fast_decode and Decoder.applies(model, cache, precision):
                decoder = Decoder(model, cache, attention_mask)
        else:
            inputs = step_input if seq is None else seq[:, :width]
            out = model(inputs, attention_mask=attention_mask[:, :width], cache=cache)
            logits = out.logits[:, -1]
        logits = scaled_logits(logits.float(), cfg.temperature)
        next_token = _choose(logits, cfg, generator)
        token_steps.append(next_token)
        logprob_steps.append(logits.log_softmax(-1).gather(-1, next_token[:, None]))
        finished |= is_stop_token(next_token, stop)
        done = bool(finished.all())
        if lockstep:
            done = all_reduce_max(0.0 if done else 1.0) == 0.0
        if done:
            break
        # finished rows keep decoding (batched, each row attends only to itself) but their new
        # tokens are masked out of attention; their outputs are discarded below
        torch.logical_not(finished, out=attention_mask[:, width])
        step_input = next_token[:, None]
        if seq is not None:
            seq[:, width] = next_token
    if not token_steps:  # max_new_tokens == 0
        empty = torch.zeros(n, 0, device=device)
        return Generation(empty.long(), empty.bool(), empty)
    length = len(token_steps) if n else 0
    # a row's step t counts when it had not finished before t: the mask column of step t - 1
    response_mask = torch.ones(n, length, dtype=torch.bool, device=device)
    response_mask[:, 1:] = attention_mask[:, p : p + length - 1]
    tokens = torch.stack(token_steps, dim=1)[:, :length].masked_fill_(~response_mask, pad_id)
    logprobs = torch.cat(logprob_steps, dim=1)[:, :length].masked_fill_(~response_mask, 0.0)
    if cfg.temperature > 0 and bool(logprobs.isnan().any()):
        # what torch.multinomial's checks would have caught (see _choose)
        raise RuntimeError("sampling met NaN probabilities: the policy's logits are not finite")
    return Generation(tokens, response_mask, logprobs)
