"""On-policy distillation's per-token signals: a frozen teacher π_T judges the tokens the policy
sampled (Agarwal et al. 2024, "On-Policy Distillation of Language Models"; Thinking Machines,
"On-Policy Distillation", 2025). Three estimators (``distill.estimator``):

- ``k1``: the per-token reward ``r_t = −coef·(log π_old(y_t) − log π_T(y_t))``, optimised by
  the strategy's policy gradient (verl's PG-OPD, Tinker's ``kl_penalty_coef``). Through the
  score function its expected gradient is ``coef·∇ KL(π ‖ π_T)``, the reverse KL.
- ``k3``: the direct loss ``k3(π_θ(y_t), π_T(y_t)) = (ρ − 1) − log ρ``, ``ρ = π_T/π_θ``, with
  gradients through ``log π_θ`` only: in expectation over ``y_t ~ π_θ`` that gradient is
  ``∇ KL(π_T ‖ π_θ)``, the *forward* KL (``E[(1 − ρ)∇log π_θ] = −Σ π_T ∇log π_θ``), though
  its value estimates the reverse one.
- ``forward_topk``: the teacher's top-k forward KL at every sampled position as a direct loss,
  ``Σ_{v∈S} q_v (log q_v − log p_v) + q_tail (log q_tail − log p_tail)`` over the teacher's k
  most likely ids ``S`` and one bucket for the rest (TRL's server distillation); with k the
  vocabulary the bucket is empty and this is the full forward KL at that position.

Every tensor is ``[..., R]`` over response tokens (``[..., R, K]`` for the top-k), with a
``mask`` of the tokens that count (the sampled tokens: an episode's observations are never
distilled on).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

DISTILL_ESTIMATORS = ("k1", "k3", "forward_topk")
# the estimators that are a loss term of their own (k1 is a reward the policy gradient reads)
LOSS_ESTIMATORS = ("k3", "forward_topk")
# the log-ratio bound k3's exp is taken within (``algorithms.kl``'s; exp(20) ~ 4.9e8)
_LOG_RATIO_LIMIT = 20.0


def clamp_logprobs(logprobs: Tensor, log_prob_min: float | None) -> Tensor:
    """``logprobs`` floored at ``log_prob_min`` (verl's ``log_prob_min_clamp``): a token the
    teacher all but rules out gives a bounded signal instead of a huge one; None: unclamped."""
    return logprobs if log_prob_min is None else logprobs.clamp(min=log_prob_min)


def k1_rewards(
    old_logprobs: Tensor,
    teacher_logprobs: Tensor,
    mask: Tensor,
    coef: float,
    log_prob_min: float | None = None,
) -> Tensor:
    """``[..., R]`` per-token reward ``−coef·(log π_old − log π_T)`` on the ``mask`` tokens, 0
    elsewhere (both logprobs floored at ``log_prob_min`` first)."""
    student = clamp_logprobs(old_logprobs, log_prob_min)
    teacher = clamp_logprobs(teacher_logprobs, log_prob_min)
    rewards = -coef * (student - teacher)
    return torch.where(mask, rewards, torch.zeros_like(rewards))


def rewards_to_go(rewards: Tensor, mask: Tensor, discount: float | None) -> Tensor:
    """``[..., R]``: each ``mask`` token's ``Σ_{s ≥ t} γ^{n(t, s)} r_s`` over the later mask
    tokens ``s`` (``n``: mask tokens between them, so an episode's observations neither decay
    nor cut the sum; Tinker's ``discounted_future_sum``); ``discount`` None: ``rewards`` as
    they are (each token its own reward, Tinker's default). 0 outside ``mask``."""
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    if discount is None:
        return torch.where(mask, rewards, zero)
    running = torch.zeros_like(rewards[..., 0])
    reversed_sums = []
    for t in reversed(range(rewards.shape[-1])):
        valid = mask[..., t]
        total = rewards[..., t] + discount * running
        reversed_sums.append(torch.where(valid, total, zero))
        running = torch.where(valid, total, running)
    return torch.stack(reversed_sums[::-1], dim=-1)


def k3_loss_terms(
    logprobs: Tensor,
    teacher_logprobs: Tensor,
    log_prob_min: float | None = None,
    loss_max: float | None = None,
) -> Tensor:
    """``[..., R]`` per-token ``k3`` of the policy's ``logprobs`` (with gradients) against the
    teacher's, ``expm1(x) − x`` with ``x = log π_T − log π_θ`` clamped to ±20; each term at
    most ``loss_max`` (verl's ``loss_max_clamp``: the clamped tokens give no gradient)."""
    student = clamp_logprobs(logprobs, log_prob_min)
    teacher = clamp_logprobs(teacher_logprobs, log_prob_min)
    log_ratio = (teacher - student).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    terms = (torch.expm1(log_ratio) - log_ratio).clamp(min=0)
    return terms if loss_max is None else terms.clamp(max=loss_max)


def forward_topk_terms(
    logprobs_at_topk: Tensor,
    teacher_topk_logprobs: Tensor,
    loss_max: float | None = None,
) -> Tensor:
    """``[..., R]`` per-position forward KL ``KL(π_T ‖ π_θ)`` over the teacher's top-k ids and a
    tail bucket.

    Args:
        logprobs_at_topk: ``[..., R, K]`` the policy's log-probabilities of the teacher's top-k
            ids at each position (with gradients).
        teacher_topk_logprobs: ``[..., R, K]`` the teacher's, its k largest.
        loss_max: each position's term at most this (``loss_max_clamp``); None: unclamped.

    The tail bucket holds ``1 − Σ_S q`` of the teacher and ``1 − Σ_S p`` of the policy; where the
    teacher's is 0 (k the vocabulary) it adds exactly 0.
    """
    teacher_probs = teacher_topk_logprobs.exp()
    head = (teacher_probs * (teacher_topk_logprobs - logprobs_at_topk)).sum(-1)
    teacher_tail = (1 - teacher_probs.sum(-1)).clamp(min=0)
    student_tail = (1 - logprobs_at_topk.exp().sum(-1)).clamp(min=torch.finfo(head.dtype).tiny)
    has_tail = teacher_tail > 0
    safe_teacher_tail = torch.where(has_tail, teacher_tail, torch.ones_like(teacher_tail))
    tail = torch.where(
        has_tail,
        teacher_tail * (safe_teacher_tail.log() - student_tail.log()),
        torch.zeros_like(head),
    )
    terms = head + tail
    return terms if loss_max is None else terms.clamp(max=loss_max)


@dataclass(frozen=True)
class DistillSettings:
    """``distill=opd``'s keys as a strategy reads them (``Strategy.distill``): ``estimator``
    (``DISTILL_ESTIMATORS``), ``coef``, ``topk``, ``use_task_reward``, ``discount`` (k1's
    reward-to-go γ, None: each token its own), the clamps (None: off)."""

    estimator: str
    coef: float
    topk: int
    use_task_reward: bool
    discount: float | None
    log_prob_min_clamp: float | None
    loss_max_clamp: float | None

    def __post_init__(self) -> None:
        if self.estimator not in DISTILL_ESTIMATORS:
            raise ValueError(
                f"distill.estimator must be one of {', '.join(DISTILL_ESTIMATORS)} "
                f"(got {self.estimator!r})"
            )

    @property
    def is_loss(self) -> bool:
        """A direct loss term (k3, forward_topk) rather than k1's reward."""
        return self.estimator in LOSS_ESTIMATORS
