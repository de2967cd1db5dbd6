"""Online PPO with a learned critic (Schulman et al. 2017; Ouyang et al. 2022 for LMs).

Per-token rewards fold the reference-KL penalty in (``rewards.py``); critic values, GAE
advantages and returns are computed once per rollout and pinned; every replayed gradient step
optimises the token-level clipped surrogate plus ``ppo_vf_coef ×`` the (optionally clipped) value
regression onto the pinned returns.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from astrai.algorithms.advantages import compute_gae
from astrai.algorithms.aggregation import Divisors, aggregate_loss
from astrai.algorithms.losses import clipped_value_loss
from astrai.algorithms.masked import (
    SumFn,
    local_sum,
    masked_global_mean,
    masked_mean,
    masked_whiten,
)
from astrai.algorithms.pass_plan import PassPlan
from astrai.algorithms.rewards import episode_token_rewards, token_rewards
from astrai.algorithms.stats import explained_variance
from astrai.algorithms.strategy import NoGradMode, Strategy, _one_of
from astrai.algorithms.turn_credit import turn_level_gae, turns_of_runs
from astrai.checkpoints.layout import CRITIC_FILES
from astrai.metrics.names import CORE_METRICS, CRITIC_METRICS
from astrai.models.scoring import response_values, score_in_parts
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout

GAE_LEVELS = ("token", "turn")


class PPOStrategy(Strategy):
    """PPO: GAE(γ, λ) advantages from a ValueModel critic over KL-penalised token rewards.

    Args:
        ppo_gamma: discount γ per token, in [0, 1].
        ppo_gae_lambda: GAE λ, in [0, 1].
        ppo_vf_coef: weight of the value loss in the summed loss. Policy and critic have
            separate parameters and optimizers, so it scales only the critic's gradients
            (before its own clipping).
        value_clip: PPO2 value clipping range; None = off.
        whiten_advantages: normalise advantages over the whole rollout (mean 0, std 1), over
            the valid responses' tokens (``Rollout.valid``: a failed episode is left out).
        entropy_coef: weight of an entropy bonus in the loss. The KL penalty in the reward only
            reaches sampled tokens, so once the policy is nearly deterministic it no longer
            separates responses and stops holding exploration up; the bonus does (CleanRL's
            ``ent_coef``).
        gae_level: ``token`` (one time step per sampled token) or ``turn`` (one per turn of a
            multi-turn episode: ``algorithms.turn_credit.turn_level_gae``, AReaL's option;
            for one-turn responses the whole response is one step).
    """

    name = "online_ppo"
    requires = ("reference", "critic")
    ADVANTAGES = ("gae",)
    metric_names = CORE_METRICS | CRITIC_METRICS
    checkpoint_files = CRITIC_FILES  # the critic's weights, optimizer and schedule

    def __init__(
        self,
        *,
        ppo_gamma: float,
        ppo_gae_lambda: float,
        ppo_vf_coef: float,
        value_clip: float | None,
        whiten_advantages: bool,
        entropy_coef: float,
        gae_level: str = "token",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        _one_of("gae_level", gae_level, GAE_LEVELS)
        self.gae_level = gae_level
        self.ppo_gamma = ppo_gamma
        self.ppo_gae_lambda = ppo_gae_lambda
        self.ppo_vf_coef = ppo_vf_coef
        self.value_clip = value_clip
        self.whiten_advantages = whiten_advantages
        self.entropy_coef = entropy_coef

    @torch.no_grad()
    def prepare(
        self,
        rollout: Rollout,
        models: Mapping[str, nn.Module | None],
        passes: PassPlan,
        sum_over_ranks: SumFn = local_sum,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        critic = models.get("critic")
        if critic is None:
            raise ValueError("online_ppo needs a critic (critic=value_model)")
        metrics = self.score_reference(
            rollout, models.get("reference"), passes, sum_over_ranks, no_grad
        )
        mask = rollout.action_mask()  # an episode's observations are not time steps
        rewards = self.token_rewards(rollout, mask)
        prompt_ids, prompt_mask = rollout.flat_prompts()
        with torch.inference_mode():  # targets only; the clone below makes an ordinary tensor
            values = score_in_parts(
                lambda *part: response_values(critic, *part),
                passes.scoring_parts(critic, rollout, prompt_mask, by_length=False),
                prompt_ids,
                prompt_mask,
                rollout.flat("response_ids"),
                rollout.flat("response_mask"),
            )
        values = values.clone().view_as(rewards)  # [B, G, R]
        if self.gae_level == "turn":
            turns = turns_of_runs(mask)
            advantages, returns = turn_level_gae(
                rewards, values, mask, turns, int(turns.max()), self.ppo_gamma, self.ppo_gae_lambda
            )
        else:
            advantages, returns = compute_gae(
                rewards, values, mask, self.ppo_gamma, self.ppo_gae_lambda
            )
        # the statistics leave an invalid response out (a failed episode: ``Rollout.valid``),
        # and it gets advantage 0
        counted = rollout.valid_action_mask()
        if self.whiten_advantages:  # over every rank's rollout, as one process would
            advantages = masked_whiten(advantages, counted, sum_over_ranks=sum_over_ranks)
        else:  # GAE left 0 outside ``mask`` already: only an invalid response's tokens change
            advantages = torch.where(counted, advantages, torch.zeros_like(advantages))
        rollout.values, rollout.returns, rollout.advantages = values, returns, advantages

        def mean(x: Tensor) -> float:
            return masked_global_mean(x, counted, sum_over_ranks).item()

        metrics.update(
            {
                # over the whole rollout, never averaged over minibatches
                "value/explained_variance": explained_variance(
                    values, returns, counted, sum_over_ranks
                ),
                "value/mean": mean(values),
                "returns/mean": mean(returns),
                "rollout/token_reward_mean": mean(rewards),
            }
        )
        return metrics

    @torch.no_grad()
    def token_rewards(self, rollout: Rollout, mask: Tensor) -> Tensor:
        """``[B, G, R]`` the rewards GAE runs over: the task's (``task_scores``; an episode's
        on its turns' last tokens) and ``−kl_coef ×`` the KL to the reference on the sampled
        tokens (``mask``), plus under k1 distillation each token's distillation reward
        (``Strategy.distill_rewards``), whose expected future sum the critic then learns."""
        kl = self.reward_kl(rollout)
        if rollout.token_scores is not None:  # an episode's rewards on its turns' last tokens
            rewards = episode_token_rewards(
                self.task_scores(rollout.token_scores), kl, mask, self.kl_coef
            )
        else:
            rewards = token_rewards(self.task_scores(rollout.rewards), kl, mask, self.kl_coef)
        distilled = self.distill_rewards(rollout)
        return rewards if distilled is None else rewards + distilled

    def loss(
        self,
        policy: nn.Module,
        batch: Minibatch,
        critic: nn.Module | None = None,
        divisors: Divisors | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        if critic is None or batch.values is None or batch.returns is None:
            raise ValueError("online_ppo needs a critic and a prepared rollout")
        mask = batch.loss_mask
        # the entropy needs gradients only for a bonus in the loss
        logprobs, entropy, at_topk = self.policy_forward(policy, batch, self.entropy_coef != 0)
        policy_loss, stats = self.policy_loss(logprobs, batch, divisors)
        distill_loss, distill_metric = self.distill_loss(logprobs, at_topk, batch, divisors)
        values = response_values(
            critic, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
        )
        value_loss, value_stats = clipped_value_loss(
            values,
            batch.values,
            batch.returns,
            mask,
            self.value_clip,
            divisors,
            self.loss_agg,
            self.norm_len,
        )
        entropy_bonus = aggregate_loss(entropy, mask, self.loss_agg, self.norm_len, divisors)
        loss = policy_loss + self.ppo_vf_coef * value_loss - self.entropy_coef * entropy_bonus
        if distill_loss is not None:
            loss = loss + distill_loss
        if self.loss_agg == "token_mean":  # the bonus is the token mean itself
            entropy_mean = entropy_bonus.detach()
        else:
            tokens = None if divisors is None else divisors.tokens
            entropy_mean = masked_mean(entropy.detach(), mask, token_count=tokens)
        metrics = {
            "loss/policy": policy_loss.detach(),
            "loss/value": value_loss.detach(),
            **distill_metric,
            "loss/total": loss.detach(),
            **self.clip_metrics(stats),
            "policy/entropy": entropy_mean,
            "value/clipfrac": value_stats["clipfrac"],
        }
        return loss, metrics
