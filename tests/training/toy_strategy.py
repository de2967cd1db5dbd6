"""A toy algorithm for ``test_strategy_registry``: REINFORCE with a batch-mean baseline, written
as a user would add one — this module plus its YAML (``_target_`` names the class), nothing else
in astrai.

Not a test module (no ``test_`` prefix): ``hydra.utils.instantiate`` imports it by name from
``conf/train_type/toy.yaml``, which the test writes."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from astrai.algorithms.aggregation import Divisors
from astrai.algorithms.masked import SumFn, local_sum, masked_mean
from astrai.algorithms.pass_plan import NoGradMode, PassPlan
from astrai.algorithms.strategy import Strategy
from astrai.metrics.names import CORE_METRICS
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout


class ToyStrategy(Strategy):
    """``A_i = baseline_scale · (r_i − mean(r))`` over this rank's batch, on every response
    token; the clipped surrogate, no KL term."""

    name = "toy"
    requires = ("reference",)
    ADVANTAGES = ("batch_baseline",)
    metric_names = CORE_METRICS  # nothing of its own beyond what every algorithm logs

    def __init__(self, *, baseline_scale: float, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.baseline_scale = baseline_scale

    def prepare(
        self,
        rollout: Rollout,
        models: Mapping[str, nn.Module | None],
        passes: PassPlan,
        sum_over_ranks: SumFn = local_sum,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        metrics = self.score_reference(
            rollout, models["reference"], passes, sum_over_ranks, no_grad
        )
        with torch.no_grad():
            centred = self.baseline_scale * (rollout.rewards - rollout.rewards.mean())  # [B, G]
            rollout.advantages = centred[..., None] * rollout.response_mask
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
