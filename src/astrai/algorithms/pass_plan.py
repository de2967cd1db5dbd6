"""How a run cuts its passes: the update's minibatches and micro-batches, and the scoring
passes of π_old, the reference and the critic, each within its memory budget
(``models.pass_memory``). π_old and the reference run the passes the update's first epoch runs
(``rollout.minibatch.EpochSplit``), so that a ratio or a KL against the update compares one
computation with itself (issue 59: in bf16 the shared-prompt cache and another micro-batch
split round apart).

One ``PassPlan`` per run, built from the batch-shape knobs (``train_type.minibatches``,
``micro_batch_size``, ``score_tokens``, ``update_tokens``) by ``training.plan.step_plan``; the
trainer cuts the update with it and hands it (bound to the step's split, ``through``) to
``Strategy.prepare``, whose scoring passes it runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from astrai.algorithms.correction import Correction, MaxFn, correct_mismatch, local_max
from astrai.algorithms.masked import SumFn, local_sum
from astrai.models.length_parts import consecutive_parts, group_parts, length_parts
from astrai.models.scoring import (
    response_logprobs,
    score_passes,
    scoring_token_budget,
    update_token_budget,
)
from astrai.rollout.minibatch import EpochSplit, Minibatch, minibatch_rows
from astrai.rollout.rollout import Rollout

# How scoring passes turn gradients off; the caller chooses: ``torch.inference_mode`` (the
# fastest), or ``torch.no_grad`` for an FSDP-sharded model, whose unsharded weights must not be
# allocated as inference tensors (its next training forward writes into them)
NoGradMode = Callable[[], AbstractContextManager[Any]]


@dataclass(frozen=True)
class PassPlan:
    """Attributes:
    minibatches: optimizer steps per update epoch (``train_type.minibatches``).
    micro_batch_size: sequences per update micro-batch and critic scoring pass
        (``train_type.micro_batch_size``); None: the token budgets decide.
    score_tokens: a critic scoring pass's token budget (``train_type.score_tokens``: ``auto``,
        None or a count; ``models.pass_memory``).
    update_tokens: an update micro-batch's (``train_type.update_tokens``), and so π_old's and
        the reference's, which run the update's passes.
    temperature: the sampling temperature the scoring passes score at.
    trains_critic: the update trains a critic (its trunk counts in ``update_tokens: auto``).
    split: the update's first epoch, which π_old and the reference are scored through
        (``through``); None: the update's micro-batching of the rows in order.
    """

    minibatches: int
    micro_batch_size: int | None
    score_tokens: Any
    update_tokens: Any
    temperature: float
    trains_critic: bool
    split: EpochSplit | None = None

    def through(self, split: EpochSplit | None) -> PassPlan:
        """This plan, π_old and the reference scored through ``split``'s forwards (the
        update's first epoch, ``EpochSplit.passes``): how the trainer's split reaches
        ``Strategy.score_reference`` through ``prepare``, whose interface every strategy
        shares."""
        return dataclasses.replace(self, split=split)

    def draw_epoch_split(
        self, policy: nn.Module, rollout: Rollout, generator: torch.Generator, draw: bool = True
    ) -> EpochSplit:
        """The next update epoch over ``rollout``'s ``B * G`` rows: its minibatches drawn from
        ``generator`` (``draw`` False: the ones its next draw will give, ``generator`` left as
        it is), cut into micro-batches (``epoch_split``). Inside the update's autocast."""
        if not draw:  # a copy of the stream at its present state
            generator = torch.Generator().set_state(generator.get_state())
        rows, device = rollout.rewards.numel(), rollout.response_ids.device  # B * G rows
        minibatches = minibatch_rows(rows, self.minibatches, generator, device)
        _, prompt_mask = rollout.flat_prompts()
        return self.epoch_split(policy, prompt_mask, rollout.flat("response_mask"), minibatches)

    def score_rollout(
        self,
        model: nn.Module,
        rollout: Rollout,
        no_grad: NoGradMode = torch.inference_mode,
        share_prompts: bool = False,
    ) -> Tensor:
        """``[B, G, R]`` logprobs of the rollout's responses under ``model`` at the sampling
        temperature, under ``no_grad`` (the caller's choice: ``NoGradMode``).

        The forwards are the update's: whole sequences (``share_prompts`` False: no shared
        prompt cache, whose bf16 roundings differ), over ``split``'s passes (the update's
        first epoch: its minibatches' micro-batches, ``EpochSplit.passes``), so π_old, the
        reference and the update's first forward of a row are one computation. Without a
        split, the update's micro-batching of the rows in order (``update_parts``:
        ``micro_batch_size`` sequences, else ``update_tokens``)."""
        split = self.split
        prompt_ids, prompt_mask = rollout.flat_prompts()
        response_ids, response_mask = rollout.flat("response_ids"), rollout.flat("response_mask")
        temperature = self.temperature
        if split is None:
            rows = torch.arange(prompt_ids.shape[0], device=prompt_ids.device)
            split = self.epoch_split(model, prompt_mask, response_mask, [rows])

        def score(ids: Tensor, mask: Tensor, response_ids: Tensor, response_mask: Tensor) -> Tensor:
            return response_logprobs(
                model, ids, mask, response_ids, response_mask, temperature,
                share_prompts=share_prompts,
            )[0]  # fmt: skip

        with no_grad():
            scored = score_passes(
                score, split.passes(), prompt_ids, prompt_mask, response_ids, response_mask
            )
        # cloned outside inference mode: an ordinary tensor, which the losses may save
        return scored.clone().view_as(rollout.logprobs)

    def scoring_parts(
        self, model: nn.Module, rollout: Rollout, prompt_mask: Tensor, by_length: bool = False
    ) -> list[Tensor]:
        """Row indices of the scoring passes of ``model`` (the critic's values; π_old and the
        reference take the update's, ``score_rollout``) over ``rollout``'s ``B * G`` rows
        (``prompt_mask [B * G, P]``: ``rollout.flat_prompts``'): consecutive ones of
        ``micro_batch_size`` where set; else under ``score_tokens``, rows sorted by length
        (``by_length``: a whole-sequence pass) or groups sorted by prompt length
        (``models.length_parts.group_parts``: a cached pass runs a group's prompt once)."""
        rows = prompt_mask.shape[0]
        if self.micro_batch_size is not None:
            return consecutive_parts(rows, self.micro_batch_size, prompt_mask.device)
        budget = scoring_token_budget(model, self.score_tokens)
        response_mask = rollout.flat("response_mask")
        if by_length:
            return length_parts(prompt_mask, response_mask, budget)
        return group_parts(prompt_mask, response_mask, rollout.response_ids.shape[1], budget)

    def epoch_split(
        self,
        policy: nn.Module,
        prompt_mask: Tensor,
        response_mask: Tensor,
        minibatches: list[Tensor],
    ) -> EpochSplit:
        """The update epoch over ``minibatches`` (row indices of the flat masks ``[N, P]``,
        ``[N, R]``: ``rollout.minibatch.minibatch_rows``), each cut into the micro-batches
        ``micro_batch_parts`` makes of its rows. Call it inside the update's autocast (the
        ``auto`` budget counts bytes in the dtype the passes compute in)."""
        parts = [
            self.micro_batch_parts(policy, prompt_mask[rows], response_mask[rows])
            for rows in minibatches
        ]
        return EpochSplit(minibatches, parts)

    def update_parts(self, policy: nn.Module, minibatch: Minibatch) -> list[Tensor]:
        """Row indices of the minibatch's update micro-batches (``micro_batch_parts``)."""
        return self.micro_batch_parts(policy, minibatch.prompt_mask, minibatch.response_mask)

    def micro_batch_parts(
        self, policy: nn.Module, prompt_mask: Tensor, response_mask: Tensor
    ) -> list[Tensor]:
        """Row indices of the update micro-batches of the rows ``prompt_mask [M, P]``,
        ``response_mask [M, R]``: consecutive ones of ``micro_batch_size`` sequences where set,
        else rows sorted by length within ``update_tokens`` (``models.length_parts``; the
        budget from ``models.scoring.update_token_budget``, the critic's trunk counted when the
        update trains one); one part where they all fit."""
        if self.micro_batch_size is not None:
            rows = prompt_mask.shape[0]
            return consecutive_parts(rows, self.micro_batch_size, prompt_mask.device)
        budget = update_token_budget(policy, self.trains_critic, self.update_tokens)
        return length_parts(prompt_mask, response_mask, budget)

    def recompute_old_logprobs(
        self,
        rollout: Rollout,
        policy: nn.Module,
        correction: Correction,
        sum_over_ranks: SumFn = local_sum,
        max_over_ranks: MaxFn = local_max,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        """Decoupled π_old (``engine.old_logprobs: recompute``): the sampling policy's weights
        score the sampled tokens with the update's own forwards (``score_rollout`` through
        ``split``: the first minibatch's ratio is exactly 1, in bf16 too). The engine's
        logprobs move to ``rollout.behaviour_logprobs``, the trainer's become
        ``rollout.logprobs`` (π_old: the PPO ratio's denominator and the KL's policy side),
        and ``rollout.is_weights`` pins ``correction``'s loss weights (None for ``none``), from
        the same π_old the ratio divides by. Returns the ``rollout/*`` mismatch metrics
        (``correction.correct_mismatch``). Call before ``Strategy.prepare``."""
        behaviour = rollout.logprobs
        rollout.logprobs = self.score_rollout(policy, rollout, no_grad)
        rollout.behaviour_logprobs = behaviour
        rollout.is_weights, metrics = correct_mismatch(
            rollout.logprobs,
            behaviour,
            rollout.action_mask(),  # an episode's observations were not sampled
            correction,
            sum_over_ranks,
            max_over_ranks,
        )
        return metrics
