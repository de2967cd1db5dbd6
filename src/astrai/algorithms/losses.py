"""Token-level losses for policy-gradient training.

Every loss is a token mean over all valid tokens of its input (``masked_mean`` with
``dim=None``), so a minibatch split into micro-batches gives the same result once each part is
weighted by its token count. ``token_count`` replaces the divisor: a data-parallel trainer
passes ``global_tokens / world_size`` so that the ranks' losses (and their gradients, which
DDP averages) average to the global token mean; the detached stats follow the same rule.

References:
    Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (clipped surrogate; the value
    clipping is the one in OpenAI baselines' ppo2).
    Schulman 2020, "Approximating KL Divergence" (the k1/k2/k3 estimators in ``kl.py``).
"""

import torch
from torch import Tensor

from astrai.algorithms.kl import kl_estimate
from astrai.algorithms.masked import masked_mean


def clipped_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float,
    token_count: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate loss (to minimise).

    Per token, with ``ratio = exp(logprobs - old_logprobs)``:
    ``max(-A * ratio, -A * clip(ratio, 1 - clip_eps, 1 + clip_eps))``.

    Args:
        logprobs: ``[N, R]`` log-probs of the taken tokens under the current policy.
        old_logprobs: ``[N, R]`` log-probs under the policy that sampled them.
        advantages: ``[N, R]`` advantages, already broadcast to tokens.
        mask: ``[N, R]`` bool, True = token counts.
        clip_eps: clip range epsilon.
        token_count: divisor of the token means; None = the valid tokens of ``mask``.

    Returns:
        ``(loss, stats)``: scalar loss; stats are detached scalars ``clipfrac`` (fraction of
        tokens where clipping was active), ``approx_kl`` (mean k2 estimate
        ``1/2 (logprobs - old_logprobs)^2``) and ``ratio_mean``.
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_eps, 1 + clip_eps)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask, token_count=token_count)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean(
                (clipped > unclipped).to(ratio.dtype), mask, token_count=token_count
            ),
            "approx_kl": masked_mean(0.5 * log_ratio**2, mask, token_count=token_count),
            "ratio_mean": masked_mean(ratio, mask, token_count=token_count),
        }
    return loss, stats


def kl_penalty_loss(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    kind: str,
    token_count: float | None = None,
) -> Tensor:
    """Token mean of the per-token KL(pi || pi_ref) estimate; gradient flows through ``logprobs``.

    Args:
        logprobs: ``[N, R]`` log-probs under the current policy.
        ref_logprobs: ``[N, R]`` log-probs under the reference policy.
        mask: ``[N, R]`` bool, True = token counts.
        kind: ``"k1"``, ``"k2"`` or ``"k3"`` (see ``kl.py``).
        token_count: divisor of the token mean; None = the valid tokens of ``mask``.

    Returns:
        Scalar loss.
    """
    return masked_mean(kl_estimate(logprobs, ref_logprobs, kind), mask, token_count=token_count)


def clipped_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_eps: float | None,
    token_count: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Squared-error value loss, optionally with PPO2 value clipping.

    Unclipped: ``1/2 (V - R)^2``. Clipped: ``V_clip = V_old + clamp(V - V_old, -eps, eps)`` and
    ``1/2 max((V - R)^2, (V_clip - R)^2)``.

    Args:
        values: ``[N, R]`` current critic values.
        old_values: ``[N, R]`` critic values at rollout time.
        returns: ``[N, R]`` value targets.
        mask: ``[N, R]`` bool, True = token counts.
        clip_eps: clip range for the value change; ``None`` disables clipping.
        token_count: divisor of the token means; None = the valid tokens of ``mask``.

    Returns:
        ``(loss, stats)``: scalar loss; stats hold the detached scalar ``clipfrac`` (fraction of
        tokens where the clipped term was strictly larger; 0 without clipping).
    """
    unclipped = (values - returns) ** 2
    if clip_eps is None:
        per_token = unclipped
        clipfrac = torch.zeros((), dtype=values.dtype, device=values.device)
    else:
        clipped_values = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
        clipped = (clipped_values - returns) ** 2
        per_token = torch.maximum(unclipped, clipped)
        with torch.no_grad():
            clipfrac = masked_mean(
                (clipped > unclipped).to(values.dtype), mask, token_count=token_count
            )
    loss = 0.5 * masked_mean(per_token, mask, token_count=token_count)
    return loss, {"clipfrac": clipfrac.detach()}
