"""Online GRPO (Shao et al. 2024, "DeepSeekMath") and its critic-free relatives: one
sequence-level advantage per response from its group (GRPO, Dr. GRPO, RLOO) or per token from
the batch (REINFORCE++), the clipped surrogate, and KL to the frozen reference."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from astrai.algorithms.advantages import (
    ADVANTAGE_SCALES,
    group_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from astrai.algorithms.aggregation import Divisors
from astrai.algorithms.losses import kl_penalty_loss
from astrai.algorithms.masked import SumFn, local_sum, masked_mean
from astrai.algorithms.pass_plan import PassPlan
from astrai.algorithms.rewards import token_rewards
from astrai.algorithms.strategy import NoGradMode, Strategy
from astrai.metrics.names import CORE_METRICS
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout


class GRPOStrategy(Strategy):
    """Critic-free policy gradient with a group or batch baseline (``train_type.advantage``):

    - ``grpo``: ``A_i = (r_i − mean(r_group)) / std`` (``scale_rewards``: the group's std,
      the batch's, or none), broadcast to every response token;
    - ``dr_grpo``: ``r_i − mean(r_group)`` (Dr. GRPO; ``grpo`` with ``scale_rewards=none``);
    - ``rloo``: ``r_i − mean_{j≠i} r_j``;
    - ``reinforce_pp``: per-token returns of the KL-shaped token rewards, whitened over the
      batch; the KL then lives in the reward, so the loss has no KL term.
    """

    name = "online_grpo"
    requires = ("reference",)
    ADVANTAGES = ("grpo", "dr_grpo", "rloo", "reinforce_pp")
    # the group baselines (grpo, dr_grpo, rloo) compare a response with the rest of its group
    min_group_size = 2
    metric_names = CORE_METRICS | {"loss/kl"}  # PPO puts the KL into the reward instead

    def __init__(self, *, adv_eps: float, scale_rewards: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if scale_rewards not in ADVANTAGE_SCALES:
            raise ValueError(
                f"train_type.scale_rewards must be one of {', '.join(ADVANTAGE_SCALES)} "
                f"(got {scale_rewards!r})"
            )
        if scale_rewards != "group" and self.advantage != "grpo":
            raise ValueError(
                f"train_type.scale_rewards={scale_rewards} applies to advantage=grpo only "
                f"(got advantage={self.advantage}, which has its own scale)"
            )
        self.adv_eps = adv_eps
        self.scale_rewards = scale_rewards

    @property
    def kl_in_loss(self) -> bool:
        """Whether the loss holds ``kl_coef ×`` the KL term: REINFORCE++ folds the KL into the
        token rewards instead, and at ``kl_coef`` 0 the term is left out (``0 ×`` a finite
        term changes nothing, and the reference is then scored only for the metrics)."""
        return self.advantage != "reinforce_pp" and self.kl_coef != 0

    def prepare(
        self,
        rollout: Rollout,
        models: Mapping[str, nn.Module | None],
        passes: PassPlan,
        sum_over_ranks: SumFn = local_sum,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        reference = models.get("reference")
        metrics = self.score_reference(rollout, reference, passes, sum_over_ranks, no_grad)
        rollout.advantages = self.advantages(rollout, sum_over_ranks)
        return metrics

    @torch.no_grad()
    def advantages(self, rollout: Rollout, sum_over_ranks: SumFn = local_sum) -> Tensor:
        """``[B, G, R]`` advantages of a rollout with pinned reference logprobs (0 at padding,
        at an episode's observations, ``Rollout.action_mask``, and on an invalid response,
        ``Rollout.valid``, which no group or batch statistic counts): the task's
        (``task_advantages``) plus, under k1 distillation, each sampled token's distillation
        signal (``Strategy.distill_advantages``: slime's ``Â_t = A_t − λ(log π − log π_T)``)."""
        advantages = self.task_advantages(rollout, sum_over_ranks)
        distilled = self.distill_advantages(rollout)  # k1 distillation's per-token signal
        return advantages if distilled is None else advantages + distilled

    @torch.no_grad()
    def task_advantages(self, rollout: Rollout, sum_over_ranks: SumFn = local_sum) -> Tensor:
        """``[B, G, R]`` the advantages of the task's rewards (``task_scores``: zeros under
        ``distill.use_task_reward: false``), as ``advantages`` describes."""
        mask = rollout.valid_action_mask()
        scores = self.task_scores(rollout.rewards)
        if self.advantage == "reinforce_pp":
            kl = self.reward_kl(rollout)
            rewards = token_rewards(scores, kl, mask, self.kl_coef)  # [B, G, R]
            return reinforce_pp_advantages(rewards, mask, sum_over_ranks)
        if self.advantage == "rloo":
            per_response = rloo_advantages(scores, rollout.valid)
        else:
            scale = "none" if self.advantage == "dr_grpo" else self.scale_rewards
            per_response = group_advantages(
                scores,
                eps=self.adv_eps,
                scale=scale,
                sum_over_ranks=sum_over_ranks,
                valid=rollout.valid,
            )  # [B, G]
        return per_response[..., None] * mask

    def loss(
        self,
        policy: nn.Module,
        batch: Minibatch,
        critic: nn.Module | None = None,
        divisors: Divisors | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        logprobs, entropy, at_topk = self.policy_forward(policy, batch)  # entropy: a metric
        mask = batch.loss_mask
        policy_loss, stats = self.policy_loss(logprobs, batch, divisors)
        distill_loss, distill_metric = self.distill_loss(logprobs, at_topk, batch, divisors)
        loss, kl_metric = policy_loss, {}
        if distill_loss is not None:
            loss = loss + distill_loss
        if batch.ref_logprobs is not None:  # None at kl_coef 0 between kl_every steps
            kl_loss = kl_penalty_loss(
                logprobs if self.kl_in_loss else logprobs.detach(),
                batch.ref_logprobs,
                mask,
                self.kl_estimator,
                divisors,
                self.loss_agg,
                self.norm_len,
            )
            if self.kl_in_loss:
                loss = loss + self.kl_coef * kl_loss
            kl_metric = {"loss/kl": kl_loss.detach()}
        elif self.kl_in_loss:
            raise ValueError("a prepared rollout without ref_logprobs needs kl_coef 0")
        tokens = None if divisors is None else divisors.tokens
        metrics = {
            "loss/policy": policy_loss.detach(),
            **kl_metric,
            **distill_metric,
            "loss/total": loss.detach(),
            **self.clip_metrics(stats),
            "policy/entropy": masked_mean(entropy, mask, token_count=tokens),
        }
        return loss, metrics
