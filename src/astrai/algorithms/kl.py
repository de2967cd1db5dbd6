"""Per-token estimators of KL(pi || pi_ref) from tokens sampled from pi.

With ``r = pi_ref(x) / pi(x)`` and ``x ~ pi`` (Schulman 2020, "Approximating KL Divergence",
http://joschu.net/blog/kl-approx.html):

- ``k1 = -log r``: unbiased, high variance, can be negative per token.
- ``k2 = 1/2 (log r)^2``: biased, low variance, always >= 0.
- ``k3 = (r - 1) - log r``: unbiased, low variance, always >= 0.
"""

import torch
from torch import Tensor

KL_ESTIMATORS = ("k1", "k2", "k3")

# exp(20) ~ 4.9e8 is far beyond any ratio worth penalising precisely; without the clamp a single
# token with a large log-ratio overflows to inf and turns the loss and its gradient into NaN.
_LOG_RATIO_LIMIT = 20.0


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref).

    For ``k3`` the log-ratio is clamped to ``[-20, 20]`` before use, so ``exp`` cannot overflow;
    tokens beyond the clamp get no gradient. ``k3`` is computed as ``expm1(log r) - log r``,
    which is the same quantity without the rounding that can make it negative near ``r = 1``.
    ``k1`` and ``k2`` use the exact log-ratio.

    Args:
        logprobs: ``[...]`` log pi of the sampled tokens (gradient flows through these).
        ref_logprobs: ``[...]`` log pi_ref of the same tokens.
        kind: one of ``KL_ESTIMATORS``.

    Returns:
        ``[...]``, same shape as the inputs.

    Raises:
        ValueError: if ``kind`` is not one of ``KL_ESTIMATORS``.
    """
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kind!r}; expected one of {KL_ESTIMATORS}")
    log_ratio = ref_logprobs - logprobs
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    log_ratio = log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    # expm1 avoids the cancellation in exp(x) - 1 for small x (in float32, exp(1e-6) - 1 - 1e-6
    # comes out negative); the floor at 0 absorbs any last-ulp rounding of expm1 itself.
    return (torch.expm1(log_ratio) - log_ratio).clamp(min=0)
