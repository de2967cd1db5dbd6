"""Re-scoring sampled responses: per-token logprobs (and entropies) of response tokens.

Shared by every strategy and by the reference model, so behaviour, reference and trainer
logprobs are computed one way.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from astrai.models.shared_prefix import CachedModel, response_outputs
from astrai.rollout.sampler import scaled_logits


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
) -> tuple[Tensor, Tensor | None]:
    """Logprobs of each response token under ``model`` at ``temperature``.

    Args:
        prompt_ids, prompt_mask: ``[N, P]`` left-padded prompts.
        response_ids, response_mask: ``[N, R]`` right-padded responses.

    Returns:
        ``logprobs [N, R]`` (0 at padding) and, when asked, ``entropy [N, R]`` of the scaled
        distribution at each response position: with grad (for an entropy bonus) unless
        ``entropy_grad`` is False, where it is computed from detached logits (a metric only;
        the same values without its autograd graph and backward pass).
    """
    # the logit at position i predicts token i + 1; a DDP wrapper has no new_cache, which
    # response_outputs calls only where supports_sharing found it (so the cast)
    logits = response_outputs(
        cast(CachedModel, model), prompt_ids, prompt_mask, response_ids, response_mask
    )
    logits = scaled_logits(logits.float(), temperature)
    logprobs = logits.log_softmax(-1).gather(-1, response_ids[..., None]).squeeze(-1)
    logprobs = logprobs.masked_fill(~response_mask.bool(), 0.0)
    entropy = None
    if with_entropy:
        entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    return logprobs, entropy


def response_values(
    critic: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
) -> Tensor:
    """Critic value of the state *before* each response token (aligned with ``logprobs``).

    Args:
        prompt_ids, prompt_mask: ``[N, P]`` left-padded prompts.
        response_ids, response_mask: ``[N, R]`` right-padded responses.

    Returns:
        ``values [N, R]``, 0 at padding.
    """
    # as in response_logprobs: new_cache only where supports_sharing found it
    values = response_outputs(
        cast(CachedModel, critic), prompt_ids, prompt_mask, response_ids, response_mask
    )
    return values.float().masked_fill(~response_mask.bool(), 0.0)


def split_rows(size: int | None, *tensors: Tensor) -> list[tuple[Tensor, ...]]:
    """The rows of ``tensors`` (all ``[N, ...]``) in consecutive parts of ``size`` rows (the
    last may be shorter); one part holding everything when ``size`` is None. Scoring a rollout
    part by part bounds the activations (and logits) alive at once."""
    n = tensors[0].shape[0]
    if size is None or size >= n:
        return [tensors]
    return list(zip(*(t.split(size) for t in tensors), strict=True))
