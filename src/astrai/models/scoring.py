"""Re-scoring sampled responses: per-token logprobs (and entropies) of response tokens.

Shared by every strategy and by the reference model, so behaviour, reference and trainer
logprobs are computed one way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from astrai.distributed import is_fsdp
from astrai.models.length_parts import pad_responses, trim_rows
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.pass_memory import (
    rows_per_pass,
    scoring_bytes_per_token,
    token_budget,
    update_bytes_per_token,
)
from astrai.models.precision import autocast_dtype
from astrai.models.shared_prefix import CachedModel, response_outputs


def scaled_logits(logits: Tensor, temperature: float) -> Tensor:
    """Temperature scaling shared by sampler and trainer; greedy (0) scores at temperature 1."""
    return logits / temperature if temperature > 0 and temperature != 1.0 else logits


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of ``softmax(logits)`` over the last dimension.

    Args:
        logits: ``[..., V]`` unnormalised scores; ``-inf`` entries (masked vocabulary) allowed.

    Returns:
        ``[...]`` entropy in nats.
    """
    log_probs = F.log_softmax(logits, dim=-1)
    # A -inf logit has p = 0 and log p = -inf; 0 * -inf is NaN, so floor log p at a finite value
    # (p * log p is then exactly 0 there, and so is its gradient).
    log_probs = log_probs.clamp(min=torch.finfo(log_probs.dtype).min)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def response_logprobs(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    share_prompts: bool = True,
    by_length: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Logprobs of each response token under ``model`` at ``temperature``.

    Args:
        prompt_ids, prompt_mask: ``[N, P]`` left-padded prompts.
        response_ids, response_mask: ``[N, R]`` right-padded responses.
        share_prompts: without autograd, run each distinct prompt once (a KV cache); False:
            the update's own forward over whole sequences (π_old: ``response_outputs``).
        by_length: after a shared prompt pass, the responses in passes of like length
            (``models.shared_prefix.response_outputs``).

    Returns:
        ``logprobs [N, R]`` (0 at padding) and, when asked, ``entropy [N, R]`` of the scaled
        distribution at each response position: with grad (for an entropy bonus) unless
        ``entropy_grad`` is False, where it is computed from detached logits (a metric only;
        the same values without its autograd graph and backward pass).
    """
    # the logit at position i predicts token i + 1; a DDP wrapper has no new_cache, which
    # response_outputs calls only where supports_sharing found it (so the cast)
    logits = response_outputs(
        cast(CachedModel, model),
        prompt_ids,
        prompt_mask,
        response_ids,
        response_mask,
        share_prompts,
        by_length,
    )
    logprobs, entropy = token_logprobs(
        logits, response_ids, temperature, with_entropy, entropy_grad
    )
    logprobs = logprobs.masked_fill(~response_mask.bool(), 0.0)
    return logprobs, entropy


def response_logprobs_at(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    ids: Tensor,
    temperature: float = 1.0,
    entropy_grad: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """``response_logprobs`` (with entropies) and, from the same forward, the logprobs
    ``[N, R, K]`` of ``ids [N, R, K]`` at each response position (0 at padding): what the
    forward top-k distillation loss reads (``algorithms.distillation``). The extra ids take one
    float32 log-softmax of the whole ``[N, R, V]`` logits, unchunked: fine at the vocabularies
    astrai's tests and CPU runs use, a cost to measure before a 150k-vocabulary run."""
    logits = response_outputs(
        cast(CachedModel, model), prompt_ids, prompt_mask, response_ids, response_mask, True, False
    )
    logprobs, entropy = token_logprobs(logits, response_ids, temperature, True, entropy_grad)
    assert entropy is not None
    padding = ~response_mask.bool()
    at_ids = scaled_logits(logits.float(), temperature).log_softmax(-1).gather(-1, ids)
    at_ids = at_ids.masked_fill(padding[..., None], 0.0)
    return logprobs.masked_fill(padding, 0.0), entropy, at_ids


def response_topk(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    k: int,
    temperature: float = 1.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Under no autograd (the caller's): ``model``'s logprobs ``[N, R]`` of the response
    tokens and its ``k`` most likely ids ``[N, R, k]`` (long) with their logprobs
    ``[N, R, k]`` at each response position, at ``temperature``, over whole sequences (the
    update's forwards: ``share_prompts`` False); 0 (ids: 0) at padding."""
    logits = response_outputs(
        cast(CachedModel, model), prompt_ids, prompt_mask, response_ids, response_mask, False, False
    )
    log_probs = scaled_logits(logits.float(), temperature).log_softmax(-1)
    padding = ~response_mask.bool()
    sampled = log_probs.gather(-1, response_ids[..., None]).squeeze(-1).masked_fill(padding, 0.0)
    top_logprobs, top_ids = log_probs.topk(k, dim=-1)
    top_logprobs = top_logprobs.masked_fill(padding[..., None], 0.0)
    return sampled, top_ids.masked_fill(padding[..., None], 0), top_logprobs


# The positions one float32 log-softmax runs over at once hold at most this many logits (256
# MiB): at a 150k vocabulary that is 441 positions, where a whole scoring pass or micro-batch
# of 1k-token responses would make several float32 copies of gigabytes each.
CHUNK_LOGITS = 2**26


def token_logprobs(
    logits: Tensor,
    token_ids: Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Logprob of each token in ``token_ids [N, R]`` under ``logits [N, R, V]`` (any dtype)
    at ``temperature``, and the entropies when asked (``response_logprobs``), in float32.

    Positions are taken ``CHUNK_LOGITS // V`` at a time, so only one chunk's float32 logits and
    log-softmax exist at once (TRL's ``selective_log_softmax``, verl's chunked entropy); each
    position's arithmetic is the same as over all of them at once. Under autograd each chunk
    is recomputed in backward (``torch.utils.checkpoint``) instead of keeping its float32
    log-softmax for it: what stays is the logits tensor the model made."""
    n, r, vocab = logits.shape
    chunk = max(1, CHUNK_LOGITS // max(vocab, 1))
    if n * r <= chunk:  # one chunk: no split, no recomputation
        return _chunk_logprobs(logits, token_ids, temperature, with_entropy, entropy_grad)
    flat, ids = logits.reshape(n * r, 1, vocab), token_ids.reshape(n * r, 1)
    parts = [
        _checkpointed(part, part_ids, temperature, with_entropy, entropy_grad)
        for part, part_ids in zip(flat.split(chunk), ids.split(chunk), strict=True)
    ]
    logprobs = torch.cat([lp for lp, _ in parts]).view(n, r)
    if not with_entropy:
        return logprobs, None
    return logprobs, torch.cat([e for _, e in parts if e is not None]).view(n, r)


def _checkpointed(
    logits: Tensor, ids: Tensor, temperature: float, with_entropy: bool, entropy_grad: bool
) -> tuple[Tensor, Tensor | None]:
    """``_chunk_logprobs`` of one chunk; where autograd records it, recomputed in backward
    (the entropy too when it has a gradient; a metric-only entropy runs without autograd)."""
    if not (torch.is_grad_enabled() and logits.requires_grad):
        return _chunk_logprobs(logits, ids, temperature, with_entropy, entropy_grad)
    if with_entropy and entropy_grad:  # one graph: both gradients meet in float32, as before
        out = checkpoint(_chunk_logprobs, logits, ids, temperature, True, use_reentrant=False)
        return cast(tuple[Tensor, Tensor | None], out)
    logprobs = checkpoint(_chunk_logprobs, logits, ids, temperature, use_reentrant=False)[0]
    if not with_entropy:
        return logprobs, None
    with torch.no_grad():
        return logprobs, _chunk_entropy(logits, temperature)


def _chunk_entropy(logits: Tensor, temperature: float) -> Tensor:
    return entropy_from_logits(scaled_logits(logits.float(), temperature))


def _chunk_logprobs(
    logits: Tensor,
    ids: Tensor,
    temperature: float,
    with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """``token_logprobs`` over ``logits [n, r, V]`` at once."""
    scaled = scaled_logits(logits.float(), temperature)
    logprobs = scaled.log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)
    entropy = None
    if with_entropy:
        entropy = entropy_from_logits(scaled if entropy_grad else scaled.detach())
    return logprobs, entropy


def response_values(
    critic: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    by_length: bool = False,
) -> Tensor:
    """Critic value of the state *before* each response token (aligned with ``logprobs``).

    Args:
        prompt_ids, prompt_mask: ``[N, P]`` left-padded prompts.
        response_ids, response_mask: ``[N, R]`` right-padded responses.
        by_length: as ``response_logprobs``'.

    Returns:
        ``values [N, R]``, 0 at padding.
    """
    # as in response_logprobs: new_cache only where supports_sharing found it
    values = response_outputs(
        cast(CachedModel, critic), prompt_ids, prompt_mask, response_ids, response_mask,
        by_length=by_length,
    )  # fmt: skip
    return values.float().masked_fill(~response_mask.bool(), 0.0)


def score_in_parts(
    score: Callable[[Tensor, Tensor, Tensor, Tensor, bool], Tensor],
    parts: list[Tensor],
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
) -> Tensor:
    """``score(prompt_ids, prompt_mask, response_ids, response_mask, split) -> [n, r]`` over the
    rows part by part (``parts``: row indices covering every row once, ``models.length_parts``),
    each part of several trimmed to the columns its rows use and its scores put back in the
    rows' places, zeros after each part's columns: ``[N, R]``. One part: the rows as they are.
    ``split`` (several parts) lets a cached pass run its responses by length (``by_length``):
    a pass that fits whole runs as it always did."""
    if len(parts) == 1:
        return score(prompt_ids, prompt_mask, response_ids, response_mask, False)
    n, width = response_ids.shape
    scored: Tensor | None = None
    for part in parts:
        rows = (prompt_ids[part], prompt_mask[part], response_ids[part], response_mask[part])
        values = pad_responses(score(*trim_rows(*rows), True), width)
        if scored is None:
            scored = values.new_zeros((n, width))
        scored[part] = values
    assert scored is not None
    return scored


def score_passes(
    score: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor],
    passes: list[tuple[Tensor, bool]],
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
) -> Tensor:
    """``score(prompt_ids, prompt_mask, response_ids, response_mask) -> [n, r]`` over the rows
    in ``passes`` (``rollout.minibatch.EpochSplit.passes``: the update's forwards, each its
    rows of ``[N, ...]`` in order and whether it is trimmed to the columns they use), each
    pass's scores put back in its rows' places, zeros after its columns: ``[N, R]``. The
    inputs of each pass are those the update's forward of it takes, tensor for tensor."""
    n, width = response_ids.shape
    scored: Tensor | None = None
    for rows, trimmed in passes:
        inputs = (prompt_ids[rows], prompt_mask[rows], response_ids[rows], response_mask[rows])
        values = pad_responses(score(*(trim_rows(*inputs) if trimmed else inputs)), width)
        if scored is None:
            scored = values.new_zeros((n, width))
        scored[rows] = values
    assert scored is not None
    return scored


def scoring_token_budget(model: nn.Module, setting: Any) -> int | None:
    """The tokens one scoring pass of ``model`` may hold (``train_type.score_tokens``, as
    ``scoring_part_rows``); None (one pass) for a sharded (FSDP) model."""
    found = _model_shape(model)
    if found is None:
        return None
    config, device, dtype, causal_lm = found
    per_token = scoring_bytes_per_token(config, dtype, causal_lm)
    return token_budget(setting, per_token, device)


def scoring_part_rows(
    model: nn.Module, setting: Any, rows: int, row_tokens: int, group: int
) -> int:
    """Rows per scoring pass of ``model`` (the policy, the reference or the critic) within the
    token budget ``setting`` (``train_type.score_tokens``: ``models.pass_memory.token_budget``,
    ``auto`` from the device's memory and the bytes a token costs: KV cache, logits in the
    autocast's dtype, activations), for ``rows`` sequences of ``row_tokens`` tokens in groups of
    ``group``. Every row (one pass) for a sharded (FSDP) model: every rank must run as many
    forwards, and a rank's padded length is its own (``train_type.micro_batch_size`` bounds it
    there)."""
    return rows_per_pass(scoring_token_budget(model, setting), row_tokens, rows, group)


def update_token_budget(policy: nn.Module, with_critic: bool, setting: Any) -> int | None:
    """The tokens one update micro-batch may hold (``train_type.update_tokens``; ``auto``:
    ``models.pass_memory.update_bytes_per_token`` at the policy's shapes, its gradient
    checkpointing and the autocast's dtype); None (the whole minibatch) for a sharded (FSDP)
    policy, as ``scoring_part_rows``."""
    found = _model_shape(policy)
    if found is None:
        return None
    config, device, dtype, _ = found
    checkpointing = any(getattr(m, "gradient_checkpointing", False) for m in policy.modules())
    per_token = update_bytes_per_token(config, dtype, checkpointing, with_critic)
    return token_budget(setting, per_token, device)


def _model_shape(model: nn.Module) -> tuple[LlamaConfig, torch.device, torch.dtype, bool] | None:
    """``model``'s config, device, the dtype its passes compute in (the autocast's where one is
    on) and whether it is a causal LM; None for a sharded (FSDP) or unknown model."""
    inner = getattr(model, "module", model)  # a DDP wrapper's module
    config = getattr(inner, "config", None)
    if not isinstance(config, LlamaConfig) or is_fsdp(model):
        return None
    weight = next(inner.parameters())
    dtype = autocast_dtype(weight.device) or weight.dtype
    return config, weight.device, dtype, isinstance(inner, LlamaForCausalLM)
