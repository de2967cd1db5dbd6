"""Per-token losses for policy-gradient training, aggregated into one scalar.

Every loss aggregates its per-token values with ``aggregation.aggregate_loss`` (a token mean by
default) and divides by the whole minibatch's counts (``divisors``), so a minibatch split into
micro-batches or over data-parallel ranks gives the same result; a data-parallel trainer passes
the global counts over the world size so that the ranks' losses (and their gradients, which DDP
averages) average to the global value. Detached statistics are always token means.

References:
    Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (clipped surrogate; the value
    clipping is the one in OpenAI baselines' ppo2).
    Schulman 2020, "Approximating KL Divergence" (the k1/k2/k3 estimators in ``kl.py``).
"""

import torch
from torch import Tensor

from astrai.algorithms.aggregation import Divisors, aggregate_loss
from astrai.algorithms.kl import kl_estimate
from astrai.algorithms.masked import masked_mean

RATIO_LEVELS = ("token", "sequence")


def importance_log_ratio(
    logprobs: Tensor, old_logprobs: Tensor, mask: Tensor, level: str = "token"
) -> Tensor:
    """``log π/π_old`` per token, or (``sequence``, GSPO) the sequence's length-normalised
    log-ratio ``1/L Σ_t (log π − log π_old)`` broadcast to its tokens.

    Args:
        logprobs, old_logprobs: ``[N, R]`` log-probs of the taken tokens.
        mask: ``[N, R]`` bool, True = valid token.
        level: one of ``RATIO_LEVELS``.

    Returns:
        ``[N, R]``; the gradient of a sequence-level entry reaches every valid token of its row.
    """
    log_ratio = logprobs - old_logprobs
    if level == "token":
        return log_ratio
    if level != "sequence":
        raise ValueError(f"unknown ratio level {level!r}; expected one of {RATIO_LEVELS}")
    return masked_mean(log_ratio, mask, dim=-1)[..., None].expand_as(log_ratio)


def clipped_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float,
    divisors: Divisors | None = None,
    *,
    clip_eps_high: float | None = None,
    clip_ratio_c: float | None = None,
    ratio_level: str = "token",
    loss_agg: str = "token_mean",
    norm_len: float | None = None,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate loss (to minimise), with DAPO's clip-higher, dual-clip and GSPO's
    sequence-level ratio as options.

    Per token, with ``ratio = exp(importance_log_ratio(...))``:
    ``l = max(-A * ratio, -A * clip(ratio, 1 - clip_eps, 1 + clip_eps_high))``, and with
    dual-clip, for ``A < 0`` only, ``min(l, -A * clip_ratio_c)``: a ratio far above 1 on a
    negative advantage no longer grows the loss without bound (Ye et al. 2020). With
    ``is_weights`` (the engine/trainer mismatch correction, ``correction.py``) each token's
    ``l`` is multiplied by its weight. The tokens' ``l`` are then aggregated by ``loss_agg``
    (``aggregation.aggregate_loss``).

    Args:
        logprobs: ``[N, R]`` log-probs of the taken tokens under the current policy.
        old_logprobs: ``[N, R]`` log-probs under the policy that sampled them.
        advantages: ``[N, R]`` advantages, already broadcast to tokens.
        mask: ``[N, R]`` bool, True = token counts.
        clip_eps: lower clip range (and the upper one unless ``clip_eps_high``).
        divisors: the whole minibatch's counts (``aggregation.Divisors``); None = this
            tensor's own.
        clip_eps_high: upper clip range (DAPO clip-higher); None = ``clip_eps``.
        clip_ratio_c: dual-clip bound (> 1) for negative advantages; None = off.
        ratio_level: ``token`` (PPO) or ``sequence`` (GSPO).
        loss_agg: one of ``aggregation.LOSS_AGG_MODES``.
        norm_len: the constant of ``seq_mean_token_sum_norm``.
        is_weights: ``[N, R]`` detached per-token loss weights ``π_old / π_behav`` after their
            band; None = 1 (no engine mismatch to correct).

    Returns:
        ``(loss, stats)``: scalar loss; stats are detached token means: ``clipfrac`` (tokens
        where the ratio clip was active), ``approx_kl`` (``1/2 (logprobs - old_logprobs)^2`` of
        the tokens themselves), ``ratio_mean``, and with dual-clip ``dual_clipfrac`` (tokens
        where its bound was active).
    """
    high = clip_eps if clip_eps_high is None else clip_eps_high
    ratio = torch.exp(importance_log_ratio(logprobs, old_logprobs, mask, ratio_level))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_eps, 1 + high)
    per_token = torch.maximum(unclipped, clipped)
    if clip_ratio_c is not None:
        bounded = torch.minimum(per_token, -advantages * clip_ratio_c)
        dual_active = (advantages < 0) & (bounded < per_token)
        per_token = torch.where(advantages < 0, bounded, per_token)
    if is_weights is not None:
        per_token = per_token * is_weights
    loss = aggregate_loss(per_token, mask, loss_agg, norm_len, divisors)
    tokens = None if divisors is None else divisors.tokens
    with torch.no_grad():
        log_ratio = logprobs - old_logprobs
        stats = {
            "clipfrac": masked_mean(
                (clipped > unclipped).to(ratio.dtype), mask, token_count=tokens
            ),
            "approx_kl": masked_mean(0.5 * log_ratio**2, mask, token_count=tokens),
            "ratio_mean": masked_mean(ratio, mask, token_count=tokens),
        }
        if clip_ratio_c is not None:
            stats["dual_clipfrac"] = masked_mean(
                dual_active.to(ratio.dtype), mask, token_count=tokens
            )
    return loss, stats


def kl_penalty_loss(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    kind: str,
    divisors: Divisors | None = None,
    loss_agg: str = "token_mean",
    norm_len: float | None = None,
) -> Tensor:
    """The per-token KL(pi || pi_ref) estimate aggregated by ``loss_agg`` (a token mean by
    default); gradient flows through ``logprobs``.

    Args:
        logprobs: ``[N, R]`` log-probs under the current policy.
        ref_logprobs: ``[N, R]`` log-probs under the reference policy.
        mask: ``[N, R]`` bool, True = token counts.
        kind: ``"k1"``, ``"k2"`` or ``"k3"`` (see ``kl.py``).
        divisors, loss_agg, norm_len: as in ``aggregation.aggregate_loss``.

    Returns:
        Scalar loss.
    """
    return aggregate_loss(
        kl_estimate(logprobs, ref_logprobs, kind), mask, loss_agg, norm_len, divisors
    )


def clipped_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_eps: float | None,
    divisors: Divisors | None = None,
    loss_agg: str = "token_mean",
    norm_len: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Squared-error value loss, optionally with PPO2 value clipping.

    Unclipped: ``1/2 (V - R)^2``. Clipped: ``V_clip = V_old + clamp(V - V_old, -eps, eps)`` and
    ``1/2 max((V - R)^2, (V_clip - R)^2)``; aggregated by ``loss_agg``.

    Args:
        values: ``[N, R]`` current critic values.
        old_values: ``[N, R]`` critic values at rollout time.
        returns: ``[N, R]`` value targets.
        mask: ``[N, R]`` bool, True = token counts.
        clip_eps: clip range for the value change; ``None`` disables clipping.
        divisors, loss_agg, norm_len: as in ``aggregation.aggregate_loss``.

    Returns:
        ``(loss, stats)``: scalar loss; stats hold the detached scalar ``clipfrac`` (token share
        where the clipped term was strictly larger; 0 without clipping).
    """
    unclipped = (values - returns) ** 2
    tokens = None if divisors is None else divisors.tokens
    if clip_eps is None:
        per_token = unclipped
        clipfrac = torch.zeros((), dtype=values.dtype, device=values.device)
    else:
        clipped_values = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
        clipped = (clipped_values - returns) ** 2
        per_token = torch.maximum(unclipped, clipped)
        with torch.no_grad():
            clipfrac = masked_mean((clipped > unclipped).to(values.dtype), mask, token_count=tokens)
    loss = 0.5 * aggregate_loss(per_token, mask, loss_agg, norm_len, divisors)
    return loss, {"clipfrac": clipfrac.detach()}
