"""Prompts shared by several rows, run once: GRPO samples ``group_size`` responses per prompt and
then scores every (prompt, response) row, so each prompt appears ``group_size`` times in a batch.
A prompt's keys and values do not depend on what follows it (attention is causal), so they are
computed once per distinct prompt and copied to its rows through the KV cache; only the response
positions then run per row, at a fraction of the cost when prompts are long or groups large.
The math is the whole-sequence forward's, but not bit for bit: a prompt's attention sums over
the prompt's keys only, and BLAS sums a product of few rows (a prompt pass of a handful of
prompts) in another order than one of many, so values can differ in the last bits (they do not at
the default jobs' shapes; the tests bound the difference). Where no prompt repeats, rows take the
whole-sequence forward as before.

Inference only (the sampler's prompt pass, the critic's values): a gradient would have to flow
back through the copied keys and values. Log-probabilities that a ratio or a KL compares with
the update's (π_old, the reference) do not take it: in bf16 its roundings differ from the
whole-sequence forward's (SmolLM2-135M: ``kl/k1`` 1.7e-2 between two copies of the same
weights), so they run the update's forward over the update's rows (``share_prompts`` False,
``rollout.minibatch.EpochSplit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

import torch
from torch import Tensor, nn

from astrai.distributed import is_fsdp
from astrai.models.kv_cache import KVCache
from astrai.models.llama import CausalLMOutput, LlamaForCausalLM
from astrai.models.precision import autocast_dtype
from astrai.models.sorted_parts import sorted_parts


class CachedModel(Protocol):
    """A model that runs new tokens after a KV cache: the causal LM or the value model."""

    def __call__(
        self, input_ids: Tensor, attention_mask: Tensor, cache: KVCache | None = None
    ) -> CausalLMOutput | Tensor: ...

    def new_cache(
        self, batch_size: int, max_length: int, dtype: torch.dtype | None = None
    ) -> KVCache: ...


@dataclass(frozen=True)
class DistinctPrompts:
    """The distinct rows of a left-padded prompt batch: ``ids``/``mask [U, P]``, and
    ``inverse [N]``, the distinct row of each original row."""

    ids: Tensor
    mask: Tensor
    inverse: Tensor


def distinct_prompts(prompt_ids: Tensor, prompt_mask: Tensor) -> DistinctPrompts | None:
    """The distinct (ids, mask) rows of ``prompt_ids``/``prompt_mask [N, P]``; None when no two
    rows are the same (nothing to share)."""
    n, p = prompt_ids.shape
    if n < 2:
        return None
    rows = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1)
    distinct, inverse = torch.unique(rows, dim=0, return_inverse=True)
    if distinct.shape[0] == n:
        return None
    return DistinctPrompts(distinct[:, :p], distinct[:, p:].bool(), inverse)


def supports_sharing(model: CachedModel | nn.Module) -> bool:
    """Whether ``model`` may take the shared path: autograd is off, it makes KV caches (the causal
    LM and the value model do; a DDP wrapper does not) and it is not FSDP-sharded (whether a
    batch shares prompts varies by rank, and so would the number of forward calls, each of
    which gathers the weights with every rank). Every model the callers pass is an
    ``nn.Module`` (typed ``CachedModel`` after the cast that ``models.scoring`` makes)."""
    return (
        not torch.is_grad_enabled()
        and hasattr(model, "new_cache")
        and isinstance(model, nn.Module)
        and not is_fsdp(model)
    )


def outputs(
    model: CachedModel,
    ids: Tensor,
    mask: Tensor,
    cache: KVCache | None,
    start: int = 0,
    at: Tensor | None = None,
) -> Tensor:
    """``model``'s output at positions ``start ..`` of ``ids [N, T]``, ``[N, T - start, ...]``,
    or at each row's columns ``at [N, K]``, ``[N, K, ...]``: logits of a causal LM (its LM head
    runs at those positions only), values of a value model (a scalar head: it runs everywhere
    and is sliced or gathered)."""
    if isinstance(model, LlamaForCausalLM) or _wraps_causal_lm(model):
        lm = cast(LlamaForCausalLM, model)  # or its DDP/FSDP wrapper, which passes keywords on
        logits_from = start or None
        lm_out = lm(ids, attention_mask=mask, cache=cache, logits_from=logits_from, logits_at=at)
        return lm_out.logits
    out = model(ids, attention_mask=mask, cache=cache)
    values = out.logits if isinstance(out, CausalLMOutput) else out
    if at is not None:
        return values.gather(1, at)
    return values[:, start:] if start else values


def prompts_differ(prompt_mask: Tensor) -> bool:
    """Whether some prompt of ``prompt_mask [N, P]`` is left-padded (a bench without values to
    read, ``bench/scale_memory.py``, answers it itself)."""
    return not bool(prompt_mask.bool().all())


def padding_free_rows(
    prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Each row as one sequence from column 0: its prompt's tokens, then its response's,
    right-padded to the longest row, so a left-padded prompt leaves no gap to compute over.

    Args:
        prompt_ids: ``[N, P]`` left-padded prompts; response_ids ``[N, R]`` right-padded.
        mask: ``[N, P + R]`` bool, the prompt mask then the response mask.

    Returns:
        ``ids [N, T]``, ``mask [N, T]`` (``T``: the longest prompt + response) and ``at [N, R]``,
        the column whose output predicts each response token (clamped into ``T`` after a row's
        response ends: its value there is padding's, masked by every caller).
    """
    p, r = prompt_ids.shape[1], response_ids.shape[1]
    prompt_len = mask[:, :p].sum(dim=1, keepdim=True)  # [N, 1]
    length = prompt_len + mask[:, p:].sum(dim=1, keepdim=True)
    t = max(int(length.max()), 1)
    cols = torch.arange(t, device=prompt_ids.device)[None, :]
    in_prompt = cols < prompt_len
    prompt_col = (p - prompt_len + cols).clamp(0, p - 1)
    response_col = (cols - prompt_len).clamp(0, r - 1)
    ids = torch.where(
        in_prompt, prompt_ids.gather(1, prompt_col), response_ids.gather(1, response_col)
    )
    aligned = cols < length
    at = (prompt_len - 1 + torch.arange(r, device=prompt_ids.device)[None, :]).clamp(max=t - 1)
    return ids, aligned, at


def _wraps_causal_lm(model: object) -> bool:
    """A DDP or FSDP wrapper (``.module``) around the causal LM: it passes keywords through."""
    inner = getattr(model, "module", None)
    return isinstance(inner, LlamaForCausalLM)


def prefill(
    model: CachedModel,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    max_length: int,
    cache_dtype: torch.dtype | None = None,
) -> tuple[KVCache, Tensor]:
    """Run left-padded prompts ``[N, P]`` into a new KV cache of ``max_length`` tokens, each
    distinct prompt once.

    Returns:
        The cache (``N`` rows, length ``P``) and ``model``'s output at the last prompt position,
        ``[N, ...]`` (the next-token logits of a causal LM).
    """
    shared = distinct_prompts(prompt_ids, prompt_mask)
    return _prefill(model, prompt_ids, prompt_mask, max_length, shared, cache_dtype)


def _prefill(
    model: CachedModel,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    max_length: int,
    shared: DistinctPrompts | None,
    cache_dtype: torch.dtype | None = None,
) -> tuple[KVCache, Tensor]:
    if shared is None:
        cache = model.new_cache(prompt_ids.shape[0], max_length, cache_dtype)
        start = _first_output_position(model, prompt_ids)
        return cache, outputs(model, prompt_ids, prompt_mask, cache, start)[:, -1]
    cache, last = _prefill_distinct(model, shared, max_length, cache_dtype)
    return cache.select_rows(shared.inverse), last.index_select(0, shared.inverse)


def _prefill_distinct(
    model: CachedModel, shared: DistinctPrompts, max_length: int, cache_dtype: torch.dtype | None
) -> tuple[KVCache, Tensor]:
    """Each distinct prompt once into a new cache of ``max_length`` tokens (``U`` rows); the
    output at its last position ``[U, ...]``."""
    cache = model.new_cache(shared.ids.shape[0], max_length, cache_dtype)
    start = _first_output_position(model, shared.ids)
    return cache, outputs(model, shared.ids, shared.mask, cache, start)[:, -1]


# Below this many prompt logits a prompt pass computes them all and keeps the last: what it
# costs is small, and the LM head's matmul over many rows takes the BLAS kernel the recorded
# default-job digests ran (a few rows take another, whose last bits differ). Above it only the
# last position's logits are computed: at a 150k vocabulary a 1k-token prompt's are 300 MB.
WHOLE_PROMPT_LOGITS = 2**24


def _first_output_position(model: CachedModel, prompt_ids: Tensor) -> int:
    """Where a prompt pass of ``prompt_ids [U, P]`` starts its outputs: 0 (every position) while
    the logits are small (``WHOLE_PROMPT_LOGITS``), else ``P - 1`` (the one it uses)."""
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", 1)
    u, p = prompt_ids.shape
    return 0 if u * p * vocab <= WHOLE_PROMPT_LOGITS else p - 1


def response_outputs(
    model: CachedModel,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    share_prompts: bool = True,
    by_length: bool = False,
) -> Tensor:
    """``model``'s output at each position that predicts a response token, ``[N, R, ...]``:
    ``outputs`` of the whole sequence at positions ``P - 1 .. P + R - 2``. Without autograd and
    where prompts repeat, a prompt pass (each distinct prompt once, ``prefill``) and then the
    responses, all at once or, ``by_length``, in passes of like length (``response_passes``:
    a pass of a split scoring pass, ``models.scoring.score_in_parts``), unless
    ``share_prompts`` is False: then the one forward the update runs, whose roundings a ratio
    or a KL against the update must share (π_old, the reference; the cached path rounds
    otherwise in bf16).

    Args:
        prompt_ids, prompt_mask: ``[N, P]`` left-padded prompts.
        response_ids, response_mask: ``[N, R]`` right-padded responses.
    """
    p, r = prompt_ids.shape[1], response_ids.shape[1]
    mask = torch.cat([prompt_mask.bool(), response_mask.bool()], dim=1)
    shared = None
    if r > 0 and share_prompts and supports_sharing(model):
        shared = distinct_prompts(prompt_ids, prompt_mask)
    if shared is None and r > 0 and prompts_differ(prompt_mask):
        # prompts of several lengths: each row's sequence from column 0, no gap between its
        # prompt and its response, right-padded to the longest (padding_free_rows)
        ids, aligned_mask, at = padding_free_rows(prompt_ids, prompt_mask, response_ids, mask)
        return outputs(model, ids, aligned_mask, None, at=at)
    if shared is None:
        # the last response token predicts nothing that is scored: it is not run
        ids = torch.cat([prompt_ids, response_ids], dim=1)
        return outputs(model, ids, mask, None, p - 1)[:, :r]
    # the autocast's dtype (bf16) where the caller opened one: the cache costs what the
    # sampler's does, and attention reads keys and values in that dtype anyway (the same logits)
    cache_dtype = autocast_dtype(prompt_ids.device)
    if by_length:
        return _responses_by_length(model, shared, response_ids, mask, cache_dtype)
    cache, first = _prefill(model, prompt_ids, prompt_mask, p + r - 1, shared, cache_dtype)
    if r == 1:
        return first[:, None]
    # the last response token predicts nothing that is scored: it is not run
    rest = outputs(model, response_ids[:, :-1], mask[:, : p + r - 1], cache)
    return torch.cat([first[:, None], rest], dim=1)


def response_passes(response_mask: Tensor) -> list[tuple[Tensor, int]]:
    """The response passes after a shared prompt pass, each its row indices and its width (its
    longest response): rows sorted by response length (at least one token: the prompt's last
    position scores the first), each pass at most ``MAX_PADDING`` padding
    (``models.sorted_parts``; a part's first row is its longest). The lengths are read once."""
    lengths = response_mask.bool().sum(dim=1).clamp_min(1).tolist()
    device = response_mask.device
    return [
        (torch.tensor(rows, device=device), lengths[rows[0]])
        for rows in sorted_parts(lengths, None)
    ]


def _responses_by_length(
    model: CachedModel,
    shared: DistinctPrompts,
    response_ids: Tensor,
    mask: Tensor,
    cache_dtype: torch.dtype | None,
) -> Tensor:
    """``response_outputs``' cached path with the responses run in ``response_passes``: each
    pass copies its rows' prompt keys and values from the distinct prompts' cache up to its own
    longest response, so no pass computes past it. ``mask [N, P + R]``; returns ``[N, R, ...]``,
    zeros after each pass's columns."""
    p, r = mask.shape[1] - response_ids.shape[1], response_ids.shape[1]
    distinct, last = _prefill_distinct(model, shared, p + r - 1, cache_dtype)
    result: Tensor | None = None
    for rows, width in response_passes(mask[:, p:]):
        inverse = shared.inverse.index_select(0, rows)
        first = last.index_select(0, inverse)[:, None]
        scored = first
        if width > 1:  # the pass's last response token predicts nothing that is scored
            cache = distinct.select_rows(inverse, p + width - 1)
            ids = response_ids[rows, : width - 1]
            scored = torch.cat([first, outputs(model, ids, mask[rows, : p + width - 1], cache)], 1)
        if result is None:
            result = scored.new_zeros((mask.shape[0], r, *scored.shape[2:]))
        result[rows, :width] = scored
    assert result is not None
    return result
