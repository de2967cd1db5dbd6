"""The engine/trainer logprob mismatch: importance weights that correct for it, and its metrics.

A generation engine with its own kernels (vLLM) samples from ``π_behav``, which differs from
the trainer's ``π_old`` (the same weights, the trainer's own forward) by numerics: bf16 rounding,
other kernels, other batching. With ``engine.old_logprobs: recompute`` (decoupled PPO, three
policies) the trainer scores the sampled tokens itself; the PPO ratio is ``π_θ / π_old`` and
each token's loss is weighted by ``w = π_old / π_behav`` (detached), bounded so that a rare
token the engine sampled far more often than the trainer would cannot dominate the update:

- ``token_truncate`` (TIS: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
  Off-Policy RL Training"; TRL's ``vllm_importance_sampling_cap`` 2.0): ``w_t`` clamped to
  ``[low, high]``, by default ``[0, 2]`` (only the top is bounded);
- ``sequence_truncate``: one weight per response, ``Π_t w_t``, clamped the same way;
- ``token_mask`` / ``sequence_mask`` (masked IS, TRL's ``*_mask`` modes): a weight outside
  ``[low, high]`` becomes 0 (the token or the whole response leaves the gradient), inside it is
  kept as it is; by default ``[0, 2]``;
- ``icepop`` (IcePop, Ling Team 2025, "Every Step Evolves", as verl's preset and OpenRLHF):
  ``token_mask`` with the published two-sided band ``[0.5, 5]``.

A masked token stays in the loss's divisor (its weight is 0, as TRL does), so the aggregation's
counts, and therefore micro-batching and data parallelism, are unchanged. Log-ratios are
clamped to ``[-20, 20]`` before ``exp`` (verl's bound), so a sequence product cannot overflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from astrai.algorithms.kl import kl_estimate
from astrai.algorithms.masked import SumFn, local_sum, masked_global_mean
from astrai.policy_lag import LagPlan

OLD_LOGPROBS = ("recompute", "bypass")
CORRECTIONS = (
    "none",
    "token_truncate",
    "token_mask",
    "sequence_truncate",
    "sequence_mask",
    "icepop",
)
# each mode's published band (low, high) of the weight, used where the config leaves it null
DEFAULT_BOUNDS: dict[str, tuple[float, float]] = {
    "token_truncate": (0.0, 2.0),
    "token_mask": (0.0, 2.0),
    "sequence_truncate": (0.0, 2.0),
    "sequence_mask": (0.0, 2.0),
    "icepop": (0.5, 5.0),
}
_LOG_RATIO_LIMIT = 20.0  # exp(±20): the weights' hard floor and ceiling before any band

MaxFn = Callable[[float], float]


def local_max(value: float) -> float:
    """The ``max_over_ranks`` of a single process: the value itself."""
    return value


@dataclass(frozen=True)
class Correction:
    """A mismatch correction: ``mode`` (one of ``CORRECTIONS``) and the weight band."""

    mode: str
    low: float = 0.0
    high: float = math.inf

    @classmethod
    def from_config(cls, mode: str, low: float | None, high: float | None) -> Correction:
        """``engine.correction`` with ``engine.correction_low`` / ``_high`` (null: the mode's
        published band, ``DEFAULT_BOUNDS``)."""
        if mode not in CORRECTIONS:
            raise ValueError(f"engine.correction must be one of {', '.join(CORRECTIONS)}")
        if mode == "none":
            return cls(mode)
        default_low, default_high = DEFAULT_BOUNDS[mode]
        return cls(
            mode,
            default_low if low is None else float(low),
            default_high if high is None else float(high),
        )

    @property
    def level(self) -> str:
        """``sequence`` for the sequence modes, else ``token``."""
        return "sequence" if self.mode.startswith("sequence") else "token"

    @property
    def masks(self) -> bool:
        """Whether a weight outside the band becomes 0 (else it is clamped to the band)."""
        return self.mode in ("token_mask", "sequence_mask", "icepop")


def correction_for(plan: LagPlan) -> Correction | None:
    """The run's correction where the trainer recomputes π_old (``old_logprobs: recompute``;
    ``none`` then still logs the mismatch), else None (bypass): the lag plan's choices
    (``astrai.policy_lag.lag_plan``: ``auto`` resolved) with its band."""
    if not plan.recomputes:
        return None
    return Correction.from_config(plan.correction, plan.correction_low, plan.correction_high)


def mismatch_ratio(
    old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, level: str = "token"
) -> Tensor:
    """``π_old / π_behav`` per token, or (``sequence``) the response's product of them
    broadcast to its tokens; log-ratios clamped to ``±20`` before ``exp``.

    Args:
        old_logprobs: ``[..., R]`` the trainer's logprobs of the sampled tokens.
        behaviour_logprobs: ``[..., R]`` the engine's logprobs of the same tokens.
        mask: ``[..., R]`` bool, True = response token.
        level: ``token`` or ``sequence``.

    Returns:
        ``[..., R]`` ratios (1 at padding).
    """
    zero = torch.zeros((), dtype=old_logprobs.dtype, device=old_logprobs.device)
    log_ratio = torch.where(mask, old_logprobs - behaviour_logprobs, zero)
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(log_ratio)
    return torch.exp(log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))


def correction_weights(ratio: Tensor, correction: Correction) -> Tensor:
    """``[..., R]`` loss weights from ``mismatch_ratio``'s ``ratio`` under ``correction``:
    clamped to the band, or 0 outside it (``masks``)."""
    if correction.masks:
        inside = (ratio >= correction.low) & (ratio <= correction.high)
        return torch.where(inside, ratio, torch.zeros((), dtype=ratio.dtype, device=ratio.device))
    return ratio.clamp(correction.low, correction.high)


@torch.no_grad()
def correct_mismatch(
    old_logprobs: Tensor,
    behaviour_logprobs: Tensor,
    mask: Tensor,
    correction: Correction,
    sum_over_ranks: SumFn = local_sum,
    max_over_ranks: MaxFn = local_max,
) -> tuple[Tensor | None, dict[str, float]]:
    """The loss weights (None for ``none``) and the ``rollout/*`` mismatch metrics of one
    rollout, over every rank's tokens.

    Args:
        old_logprobs, behaviour_logprobs, mask: ``[..., R]`` as ``mismatch_ratio``.
        correction: the mode and band.
        sum_over_ranks, max_over_ranks: reduce a tensor / a float over the ranks.

    Returns:
        ``(weights [..., R] or None, metrics)``. ``logprob_diff_*``: ``|log π_old − log
        π_behav|``; ``mismatch_kl``: k3 of the two, an estimate of KL(π_behav ‖ π_old) from
        the engine's samples; ``is_ratio_*``: the mode's ratio (per token, or per response
        broadcast to its tokens) before its band, over the response tokens;
        ``is_masked_frac``: the share of response tokens the band zeroed (masking modes).
    """
    level = correction.level if correction.mode != "none" else "token"
    ratio = mismatch_ratio(old_logprobs, behaviour_logprobs, mask, level)
    weights = None if correction.mode == "none" else correction_weights(ratio, correction)
    diff = (old_logprobs - behaviour_logprobs).abs()
    valid = mask.any().item()
    far = torch.finfo(ratio.dtype).max

    def extreme(x: Tensor, sign: float) -> float:
        fill = torch.full((), -sign * far, dtype=x.dtype, device=x.device)
        local = (sign * torch.where(mask, x, fill)).max().item()
        return sign * max_over_ranks(local if valid else -far)

    masked = (
        torch.zeros_like(ratio)
        if weights is None or not correction.masks
        else ((weights == 0) & mask).to(ratio.dtype)
    )
    metrics = {
        "rollout/logprob_diff_mean": masked_global_mean(diff, mask, sum_over_ranks).item(),
        "rollout/logprob_diff_max": max(extreme(diff, 1.0), 0.0),
        "rollout/mismatch_kl": masked_global_mean(
            kl_estimate(behaviour_logprobs, old_logprobs, "k3"), mask, sum_over_ranks
        ).item(),
        "rollout/is_ratio_min": extreme(ratio, -1.0),
        "rollout/is_ratio_mean": masked_global_mean(ratio, mask, sum_over_ranks).item(),
        "rollout/is_ratio_max": extreme(ratio, 1.0),
        "rollout/is_masked_frac": masked_global_mean(masked, mask, sum_over_ranks).item(),
    }
    return weights, metrics
