"""Online GRPO (Shao et al. 2024, "DeepSeekMath"): group-normalised rewards as advantages,
token-level clipped surrogate, KL to the frozen reference in the loss."""

from __future__ import annotations

from torch import Tensor, nn

from astrai.algorithms.advantages import group_advantages
from astrai.algorithms.losses import clipped_policy_loss, kl_penalty_loss
from astrai.algorithms.masked import SumFn, local_sum, masked_mean
from astrai.algorithms.strategy import Strategy
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout


class GRPOStrategy(Strategy):
    """GRPO: A_i = (r_i − mean(r_group)) / std(r_group), broadcast to every response token."""

    name = "online_grpo"

    def __init__(self, *, adv_eps: float, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.adv_eps = adv_eps

    def prepare(
        self,
        rollout: Rollout,
        reference: nn.Module,
        critic: nn.Module | None = None,
        sum_over_ranks: SumFn = local_sum,
    ) -> dict[str, float]:
        metrics = self.score_reference(rollout, reference, sum_over_ranks)
        advantages = group_advantages(rollout.rewards, eps=self.adv_eps)  # [B, G]
        rollout.advantages = advantages[..., None] * rollout.response_mask  # [B, G, R]
        return metrics

    def loss(
        self,
        policy: nn.Module,
        batch: Minibatch,
        critic: nn.Module | None = None,
        token_count: float | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        logprobs, entropy = self.policy_logprobs(policy, batch)
        mask = batch.response_mask
        policy_loss, stats = clipped_policy_loss(
            logprobs, batch.old_logprobs, batch.advantages, mask, self.clip_eps, token_count
        )
        kl_loss = kl_penalty_loss(
            logprobs, batch.ref_logprobs, mask, self.kl_estimator, token_count
        )
        loss = policy_loss + self.kl_coef * kl_loss
        metrics = {
            "loss/policy": policy_loss.detach(),
            "loss/kl": kl_loss.detach(),
            "loss/total": loss.detach(),
            "policy/clipfrac": stats["clipfrac"],
            "policy/approx_kl": stats["approx_kl"],
            "policy/entropy": masked_mean(entropy.detach(), mask, token_count=token_count),
        }
        return loss, metrics
