"""A toy algorithm that requires a teacher: on-policy distillation written as a user would add it —
this module plus ``train_type/toy_teacher.yaml`` (``_target_`` names the class), nothing else
in astrai (issue 60: models by role).

The sampled tokens' advantage is the teacher's per-token reverse-KL reward,
``teacher_coef · (log π_teacher(x_t) − log π_old(x_t))`` (Agarwal et al. 2024, "On-Policy
Distillation of Language Models"; Thinking Machines' "On-Policy Distillation", 2025), under the
clipped surrogate. ``toy/teacher_kl`` logs k3 of π_old vs the teacher over the sampled tokens.

Not a test module (no ``test_`` prefix): ``hydra.utils.instantiate`` imports it by name from the
YAML the test writes."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from astrai.algorithms.aggregation import Divisors
from astrai.algorithms.kl import kl_estimate
from astrai.algorithms.masked import SumFn, local_sum, masked_global_mean, masked_mean
from astrai.algorithms.pass_plan import NoGradMode, PassPlan
from astrai.algorithms.strategy import Strategy
from astrai.metrics.names import CORE_METRICS
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout


class ToyTeacherStrategy(Strategy):
    """Per-token advantages from a frozen teacher's logprobs of the sampled tokens."""

    name = "toy_teacher"
    requires = ("reference", "teacher")  # the teacher comes from teacher.path
    ADVANTAGES = ("teacher_reverse_kl",)
    metric_names = CORE_METRICS | {"toy/teacher_kl"}

    def __init__(self, *, teacher_coef: float, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.teacher_coef = teacher_coef

    def prepare(
        self,
        rollout: Rollout,
        models: Mapping[str, nn.Module | None],
        passes: PassPlan,
        sum_over_ranks: SumFn = local_sum,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        teacher = models["teacher"]
        assert teacher is not None
        metrics = self.score_reference(
            rollout, models["reference"], passes, sum_over_ranks, no_grad
        )
        # the teacher scores the sampled tokens through the same passes as π_old and the
        # reference (``passes.score_rollout``): a teacher with the policy's weights reads exactly 0
        teacher_logprobs = passes.score_rollout(teacher, rollout, no_grad)  # [B, G, R]
        mask = rollout.valid_action_mask()
        with torch.no_grad():
            reverse_kl = rollout.logprobs - teacher_logprobs  # k1 per token, [B, G, R]
            rollout.advantages = -self.teacher_coef * reverse_kl * mask
            k3 = kl_estimate(rollout.logprobs, teacher_logprobs, "k3")
            metrics["toy/teacher_kl"] = masked_global_mean(k3, mask, sum_over_ranks).item()
        return metrics

    def loss(
        self,
        policy: nn.Module,
        batch: Minibatch,
        critic: nn.Module | None = None,
        divisors: Divisors | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        logprobs, entropy = self.policy_logprobs(policy, batch)
        loss, stats = self.policy_loss(logprobs, batch, divisors)
        tokens = None if divisors is None else divisors.tokens
        return loss, {
            "loss/policy": loss.detach(),
            "loss/total": loss.detach(),
            **self.clip_metrics(stats),
            "policy/entropy": masked_mean(entropy, batch.loss_mask, token_count=tokens),
        }
