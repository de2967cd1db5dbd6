"""The interface GRPO and PPO share: pin targets once per rollout, then give a minibatch loss."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from astrai.algorithms.kl import KL_ESTIMATORS, kl_estimate
from astrai.algorithms.masked import SumFn, local_sum, masked_global_mean
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout
from astrai.rollout.sampler import SamplingConfig
from astrai.rollout.scoring import response_logprobs, split_rows


class Strategy(ABC):
    """An RL algorithm: its hyperparameters, how it pins targets and how it computes the loss.

    Built by ``hydra.utils.instantiate(cfg.train_type)``; ``optimizer`` and ``scheduler`` arrive
    as partials (``_partial_: true``) and receive parameters / the optimizer in the trainer.
    Every argument is required: the values live in ``conf/train_type/`` (one home per knob).

    Data parallelism reaches a strategy only as two explicit arguments: ``prepare`` gets the
    trainer's ``sum_over_ranks`` for statistics of the whole rollout, ``loss`` gets the
    ``token_count`` that divides the token means (see ``algorithms.masked``).
    """

    name: str = "strategy"
    requires_critic: bool = False

    def __init__(
        self,
        *,
        group_size: int,
        prompts_per_step: int,
        clip_eps: float,
        kl_coef: float,
        kl_estimator: str,
        ppo_epochs: int,
        minibatches: int,
        micro_batch_size: int | None,
        sampling: SamplingConfig | dict,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any],
    ) -> None:
        if kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"train_type.kl_estimator must be one of {KL_ESTIMATORS}")
        self.group_size = group_size
        self.prompts_per_step = prompts_per_step
        self.clip_eps = clip_eps
        self.kl_coef = kl_coef
        self.kl_estimator = kl_estimator
        self.ppo_epochs = ppo_epochs
        self.minibatches = minibatches
        self.micro_batch_size = micro_batch_size  # the trainer's gradient accumulation
        self.sampling = (
            sampling if isinstance(sampling, SamplingConfig) else SamplingConfig(**dict(sampling))
        )
        self.optimizer = optimizer
        self.scheduler = scheduler

    @torch.no_grad()
    def score_reference(
        self, rollout: Rollout, reference: nn.Module, sum_over_ranks: SumFn = local_sum
    ) -> dict[str, float]:
        """Pin ``rollout.ref_logprobs`` and return k1/k2/k3 of behaviour vs reference (token
        means over every rank's rollout)."""
        prompt_ids, prompt_mask = rollout.flat_prompts()
        parts = split_rows(
            self.micro_batch_size,  # the memory bound of the update holds here too
            prompt_ids,
            prompt_mask,
            rollout.flat("response_ids"),
            rollout.flat("response_mask"),
        )
        temperature = self.sampling.temperature
        ref = torch.cat(
            [
                response_logprobs(reference, ids, mask, response_ids, response_mask, temperature)[0]
                for ids, mask, response_ids, response_mask in parts
            ]
        )
        rollout.ref_logprobs = ref.view_as(rollout.logprobs)
        mask = rollout.response_mask
        return {
            f"kl/{kind}": masked_global_mean(
                kl_estimate(rollout.logprobs, rollout.ref_logprobs, kind), mask, sum_over_ranks
            ).item()
            for kind in KL_ESTIMATORS
        }

    @abstractmethod
    def prepare(
        self,
        rollout: Rollout,
        reference: nn.Module,
        critic: nn.Module | None = None,
        sum_over_ranks: SumFn = local_sum,
    ) -> dict[str, float]:
        """Compute and pin every target the replayed gradient steps optimise; return metrics.

        ``sum_over_ranks`` sums a tensor over the data-parallel ranks, so statistics of the
        whole rollout (advantage whitening, logged means) cover every rank's share.
        """

    @abstractmethod
    def loss(
        self,
        policy: nn.Module,
        batch: Minibatch,
        critic: nn.Module | None = None,
        token_count: float | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Token-mean loss over the whole minibatch and detached scalar metrics.

        ``token_count`` divides every token mean (None: the minibatch's own valid tokens); a
        data-parallel trainer passes ``global_tokens / world_size``.
        """

    def policy_logprobs(self, policy: nn.Module, batch: Minibatch) -> tuple[Tensor, Tensor]:
        """Current policy logprobs and entropies ``[M, R]`` of the minibatch's responses."""
        logprobs, entropy = response_logprobs(
            policy,
            batch.prompt_ids,
            batch.prompt_mask,
            batch.response_ids,
            batch.response_mask,
            self.sampling.temperature,
            with_entropy=True,
        )
        assert entropy is not None
        return logprobs, entropy
