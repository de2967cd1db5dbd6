"""The interface GRPO and PPO share: pin targets once per rollout, then give a minibatch loss."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from astrai.algorithms.aggregation import LOSS_AGG_MODES, Divisors
from astrai.algorithms.correction import Correction, MaxFn, correct_mismatch, local_max
from astrai.algorithms.kl import KL_ESTIMATORS, kl_estimate
from astrai.algorithms.losses import RATIO_LEVELS, clipped_policy_loss
from astrai.algorithms.masked import SumFn, local_sum, masked_global_mean
from astrai.algorithms.rewards import KL_REWARD_CLAMP
from astrai.rollout.length_parts import consecutive_parts, group_parts, length_parts
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout
from astrai.rollout.sampler import SamplingConfig
from astrai.rollout.scoring import (
    response_logprobs,
    score_in_parts,
    scoring_token_budget,
    update_token_budget,
)

# How scoring passes turn gradients off; the caller chooses: ``torch.inference_mode`` (the
# fastest), or ``torch.no_grad`` for an FSDP-sharded model, whose unsharded weights must not be
# allocated as inference tensors (its next training forward writes into them)
NoGradMode = Callable[[], AbstractContextManager[Any]]


class Strategy(ABC):
    """An RL algorithm: its hyperparameters, how it pins targets and how it computes the loss.

    Built by ``hydra.utils.instantiate(cfg.train_type)``; ``optimizer`` and ``scheduler`` arrive
    as partials (``_partial_: true``) and receive parameters / the optimizer in the trainer.
    Every argument is required: the values live in ``conf/train_type/`` (one home per knob).

    Data parallelism reaches a strategy only as two explicit arguments: ``prepare`` gets the
    trainer's ``sum_over_ranks`` for statistics of the whole rollout, ``loss`` gets the
    ``divisors`` (the whole minibatch's token and sequence counts) that divide its means (see
    ``algorithms.aggregation``).

    The options every strategy shares (``conf/train_type/*.yaml``, ``docs/algorithms.md``):
    ``advantage`` (the estimator; each strategy lists its own in ``ADVANTAGES``), ``loss_agg``
    (``aggregation.LOSS_AGG_MODES``), ``clip_eps_low``/``clip_eps_high`` (None: ``clip_eps``),
    dual-clip ``clip_ratio_c``, ``ratio_level`` (token | sequence), ``mask_truncated``
    (responses cut at the length limit leave the loss), ``filter_groups`` with
    ``max_resample_rounds`` (DAPO dynamic sampling, carried out by the trainer).
    """

    # --- what the rest of the trainer asks of an algorithm (``algorithms.registry``) ---
    name: ClassVar[str] = "strategy"  # the ``train_type`` option and its checkpoints' label
    requires_critic: ClassVar[bool] = False  # ``critic=value_model`` must be composed with it
    ADVANTAGES: ClassVar[tuple[str, ...]] = ()
    # the smallest ``group_size`` it accepts (a group baseline needs two responses to compare)
    min_group_size: ClassVar[int] = 1
    # the step metrics every run of it emits (``metrics.names.METRICS`` keys; the options'
    # own come on top, ``metrics.names.emitted_metrics``)
    metric_names: ClassVar[frozenset[str]] = frozenset()
    # files a checkpoint of it holds beyond ``checkpoints.layout.COMMON_FILES``
    checkpoint_files: ClassVar[tuple[str, ...]] = ()

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
        advantage: str,
        loss_agg: str,
        clip_eps_low: float | None,
        clip_eps_high: float | None,
        clip_ratio_c: float | None,
        ratio_level: str,
        mask_truncated: bool,
        filter_groups: bool,
        max_resample_rounds: int,
        max_policy_lag: int = 0,
        score_tokens: Any = "auto",
        update_tokens: Any = "auto",
    ) -> None:
        # its knobs' names and facts, checked here only: config validation builds the strategy
        # and turns this ValueError into the one-line config error (config.train_type_checks)
        _one_of("kl_estimator", kl_estimator, KL_ESTIMATORS)
        _one_of("advantage", advantage, self.ADVANTAGES, f" for train_type={self.name}")
        _one_of("loss_agg", loss_agg, LOSS_AGG_MODES)
        _one_of("ratio_level", ratio_level, RATIO_LEVELS)
        if group_size < self.min_group_size:
            raise ValueError(
                f"train_type.group_size must be >= {self.min_group_size} for {self.name} "
                f"(got {group_size})"
            )
        self.group_size = group_size
        self.prompts_per_step = prompts_per_step
        self.clip_eps = clip_eps
        self.kl_coef = kl_coef
        self.kl_estimator = kl_estimator
        self.ppo_epochs = ppo_epochs
        self.minibatches = minibatches
        self.micro_batch_size = micro_batch_size  # the trainer's gradient accumulation
        self.score_tokens = score_tokens  # a scoring pass's token budget (models.pass_memory)
        self.update_tokens = update_tokens  # an update micro-batch's
        self.sampling = (
            sampling if isinstance(sampling, SamplingConfig) else SamplingConfig(**dict(sampling))
        )
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.advantage = advantage
        self.loss_agg = loss_agg
        self.clip_eps_low = clip_eps if clip_eps_low is None else clip_eps_low
        self.clip_eps_high = clip_eps if clip_eps_high is None else clip_eps_high
        self.clip_ratio_c = clip_ratio_c
        self.ratio_level = ratio_level
        self.mask_truncated = mask_truncated
        self.filter_groups = filter_groups
        self.max_resample_rounds = max_resample_rounds
        # train_type's node holds it, no algorithm reads it: the run's plan does
        # (training.plan), so it is accepted here and not kept
        del max_policy_lag

    def score_reference(
        self,
        rollout: Rollout,
        reference: nn.Module | None,
        sum_over_ranks: SumFn = local_sum,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        """Pin ``rollout.ref_logprobs`` and return k1/k2/k3 of behaviour vs reference (token
        means over every rank's rollout); the forward runs under ``no_grad``.

        ``reference`` None (allowed only at ``kl_coef`` 0, where nothing but the ``kl/*``
        metrics reads it): no forward, ``ref_logprobs`` stays None and no metric is returned.
        """
        if reference is None:
            if self.kl_coef != 0:
                raise ValueError("a reference is needed while train_type.kl_coef is nonzero")
            rollout.ref_logprobs = None
            return {}
        rollout.ref_logprobs = self.score_rollout(reference, rollout, no_grad)
        mask = rollout.action_mask()
        return {
            f"kl/{kind}": masked_global_mean(
                kl_estimate(rollout.logprobs, rollout.ref_logprobs, kind), mask, sum_over_ranks
            ).item()
            for kind in KL_ESTIMATORS
        }

    def score_rollout(
        self,
        model: nn.Module,
        rollout: Rollout,
        no_grad: NoGradMode = torch.inference_mode,
        share_prompts: bool = True,
    ) -> Tensor:
        """``[B, G, R]`` logprobs of the rollout's responses under ``model`` at the sampling
        temperature, under ``no_grad`` (the caller's choice: ``NoGradMode``), in micro-batches
        of ``micro_batch_size`` sequences (the memory bound of the update holds here too);
        ``share_prompts`` as ``rollout.scoring.response_logprobs``."""
        prompt_ids, prompt_mask = rollout.flat_prompts()
        temperature = self.sampling.temperature

        def score(
            ids: Tensor, mask: Tensor, response_ids: Tensor, response_mask: Tensor, split: bool
        ) -> Tensor:
            return response_logprobs(
                model,
                ids,
                mask,
                response_ids,
                response_mask,
                temperature,
                share_prompts=share_prompts,
                by_length=split,
            )[0]

        with no_grad():
            scored = score_in_parts(
                score,
                self.scoring_parts(model, rollout, prompt_mask, by_length=not share_prompts),
                prompt_ids,
                prompt_mask,
                rollout.flat("response_ids"),
                rollout.flat("response_mask"),
            )
        # cloned outside inference mode: an ordinary tensor, which the losses may save
        return scored.clone().view_as(rollout.logprobs)

    def scoring_parts(
        self, model: nn.Module, rollout: Rollout, prompt_mask: Tensor, by_length: bool
    ) -> list[Tensor]:
        """Row indices of the scoring passes of ``model`` over ``rollout``'s ``B * G`` rows
        (``prompt_mask [B * G, P]``: ``rollout.flat_prompts``'): consecutive ones of
        ``micro_batch_size`` where set; else under ``score_tokens``, rows sorted by length
        (``by_length``: a whole-sequence pass, π_old's, split as the update splits) or groups
        sorted by prompt length (``rollout.length_parts.group_parts``: a cached pass runs a
        group's prompt once)."""
        rows = prompt_mask.shape[0]
        if self.micro_batch_size is not None:
            return consecutive_parts(rows, self.micro_batch_size, prompt_mask.device)
        budget = scoring_token_budget(model, self.score_tokens)
        response_mask = rollout.flat("response_mask")
        if by_length:
            return length_parts(prompt_mask, response_mask, budget)
        return group_parts(prompt_mask, response_mask, rollout.response_ids.shape[1], budget)

    def update_parts(self, policy: nn.Module, minibatch: Minibatch) -> list[Tensor]:
        """Row indices of the minibatch's update micro-batches: consecutive ones of
        ``micro_batch_size`` sequences where set, else rows sorted by length within
        ``update_tokens`` (``rollout.length_parts``; the budget from
        ``rollout.scoring.update_token_budget``, the critic's trunk counted when the strategy
        trains one); one part where the whole minibatch fits."""
        if self.micro_batch_size is not None:
            rows = minibatch.response_ids.shape[0]
            return consecutive_parts(rows, self.micro_batch_size, minibatch.response_ids.device)
        budget = update_token_budget(policy, self.requires_critic, self.update_tokens)
        return length_parts(minibatch.prompt_mask, minibatch.response_mask, budget)

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
        score the sampled tokens with the trainer's own forward, the update's (whole sequences,
        no prompt cache: the first ratio rounds to 1 in bf16 too). The engine's logprobs move to
        ``rollout.behaviour_logprobs``, the trainer's become ``rollout.logprobs`` (π_old: the
        PPO ratio's denominator and the KL's behaviour side), and ``rollout.is_weights`` pins
        ``correction``'s loss weights (None for ``none``). Returns the ``rollout/*`` mismatch
        metrics (``correction.correct_mismatch``). Call before ``prepare``."""
        behaviour = rollout.logprobs
        rollout.logprobs = self.score_rollout(policy, rollout, no_grad, share_prompts=False)
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

    @torch.no_grad()
    def reward_kl(self, rollout: Rollout) -> Tensor:
        """``[B, G, R]`` per-token KL of behaviour vs reference for KL-shaped token rewards,
        clamped to ``±KL_REWARD_CLAMP``; zeros at ``kl_coef`` 0, where the penalty
        ``−kl_coef·KL`` is ``−0.0`` either way (bitwise what k2 and k3, both ≥ 0, would give)
        and the reference may not have been scored."""
        if self.kl_coef == 0:
            return torch.zeros_like(rollout.logprobs)
        assert rollout.ref_logprobs is not None
        kl = kl_estimate(rollout.logprobs, rollout.ref_logprobs, self.kl_estimator)
        return kl.clamp(-KL_REWARD_CLAMP, KL_REWARD_CLAMP)

    @abstractmethod
    def prepare(
        self,
        rollout: Rollout,
        reference: nn.Module | None,
        critic: nn.Module | None = None,
        sum_over_ranks: SumFn = local_sum,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        """Compute and pin every target the replayed gradient steps optimise; return metrics.

        ``sum_over_ranks`` sums a tensor over the data-parallel ranks, so statistics of the
        whole rollout (advantage whitening, logged means) cover every rank's share.
        ``reference`` None skips the reference forward (``score_reference``; ``kl_coef`` 0
        only): no ``kl/*`` metrics and ``rollout.ref_logprobs`` None. ``no_grad``: how the
        reference's forward turns gradients off (``NoGradMode``).
        """

    @abstractmethod
    def loss(
        self,
        policy: nn.Module,
        batch: Minibatch,
        critic: nn.Module | None = None,
        divisors: Divisors | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The loss over the whole minibatch (aggregated by ``loss_agg``) and detached scalar
        metrics (token means).

        ``divisors`` divide every mean (None: the minibatch's own counts); a data-parallel
        trainer passes the global counts over the world size.
        """

    @property
    def norm_len(self) -> int:
        """The constant divisor of ``loss_agg=seq_mean_token_sum_norm``: the response limit."""
        return self.sampling.max_new_tokens

    def policy_loss(
        self, logprobs: Tensor, batch: Minibatch, divisors: Divisors | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The clipped surrogate of the minibatch with this strategy's clipping, ratio level and
        aggregation; stats as ``losses.clipped_policy_loss``."""
        # π_old None: this step's only update, whose own forward (detached) is π_old, as TRL's
        # and verl's on-policy steps: the ratio is exactly 1 in any precision
        old_logprobs = logprobs.detach() if batch.old_logprobs is None else batch.old_logprobs
        return clipped_policy_loss(
            logprobs,
            old_logprobs,
            batch.advantages,
            batch.loss_mask,
            self.clip_eps_low,
            divisors,
            clip_eps_high=self.clip_eps_high,
            clip_ratio_c=self.clip_ratio_c,
            ratio_level=self.ratio_level,
            loss_agg=self.loss_agg,
            norm_len=self.norm_len,
            is_weights=batch.is_weights,
        )

    def clip_metrics(self, stats: dict[str, Tensor]) -> dict[str, Tensor]:
        """``policy/*`` metrics of the clipped surrogate (dual-clip's only when it is on)."""
        metrics = {"policy/clipfrac": stats["clipfrac"], "policy/approx_kl": stats["approx_kl"]}
        if "dual_clipfrac" in stats:
            metrics["policy/dual_clipfrac"] = stats["dual_clipfrac"]
        return metrics

    def policy_logprobs(
        self, policy: nn.Module, batch: Minibatch, entropy_grad: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Current policy logprobs and entropies ``[M, R]`` of the minibatch's responses; the
        entropies carry gradients only with ``entropy_grad`` (an entropy bonus in the loss)."""
        logprobs, entropy = response_logprobs(
            policy,
            batch.prompt_ids,
            batch.prompt_mask,
            batch.response_ids,
            batch.response_mask,
            self.sampling.temperature,
            with_entropy=True,
            entropy_grad=entropy_grad,
        )
        assert entropy is not None
        return logprobs, entropy


def _one_of(key: str, value: object, choices: tuple[str, ...], where: str = "") -> None:
    """``train_type.<key> must be one of a, b, c[ for ...] (got 'x')``, a ``ValueError``."""
    if value not in choices:
        raise ValueError(
            f"train_type.{key} must be one of {', '.join(choices)}{where} (got {value!r})"
        )
