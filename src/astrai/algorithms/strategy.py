"""The interface GRPO and PPO share: pin targets once per rollout, then give a minibatch loss."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from astrai.algorithms.aggregation import LOSS_AGG_MODES, Divisors, aggregate_loss
from astrai.algorithms.distillation import (
    DistillSettings,
    forward_topk_terms,
    k1_rewards,
    k3_loss_terms,
    rewards_to_go,
)
from astrai.algorithms.kl import KL_ESTIMATORS, kl_estimate
from astrai.algorithms.losses import RATIO_LEVELS, clipped_policy_loss
from astrai.algorithms.masked import SumFn, local_sum, masked_global_mean, masked_mean
from astrai.algorithms.pass_plan import NoGradMode, PassPlan
from astrai.algorithms.rewards import KL_REWARD_CLAMP
from astrai.models.scoring import response_logprobs, response_logprobs_at
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout


class Strategy(ABC):
    """An RL algorithm: its hyperparameters, how it pins targets and how it computes the loss.

    Built by ``hydra.utils.instantiate`` of ``cfg.train_type`` without the run's keys
    (``config.train_type_checks.build_strategy``); ``optimizer`` and ``scheduler`` arrive
    as partials (``_partial_: true``) and receive parameters / the optimizer in the trainer.
    Every argument is required: the values live in ``conf/train_type/`` (one home per knob).
    The batch shape (``ppo_epochs``, ``minibatches``, ``micro_batch_size``, ``score_tokens``,
    ``update_tokens``) and ``max_policy_lag`` are ``train_type`` keys too, but the run's, not the
    algorithm's: ``training.plan.step_plan`` reads them (the passes into an
    ``algorithms.pass_plan.PassPlan``, which ``prepare`` receives) and
    ``config.train_type_checks.strategy_node`` leaves them out of the constructor's arguments.

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

    # --- what the rest of astrai asks of an algorithm (``train_type._target_`` names the class) ---
    name: ClassVar[str] = "strategy"  # the label its checkpoints and the banner give the run
    # the models ``prepare`` receives by role (``training.roles`` builds them): ``reference``
    # (the frozen initial policy), ``critic`` (``critic=value_model``), ``teacher``
    # (``teacher.path``); a role not named here is not built
    requires: ClassVar[tuple[str, ...]] = ()
    ADVANTAGES: ClassVar[tuple[str, ...]] = ()
    # the smallest ``group_size`` it accepts (a group baseline needs two responses to compare)
    min_group_size: ClassVar[int] = 1
    # the step metrics every run of it emits (``metrics.names.METRICS`` keys; the options'
    # own come on top, ``metrics.names.emitted_metrics``)
    metric_names: ClassVar[frozenset[str]] = frozenset()
    # files a checkpoint of it holds beyond ``checkpoints.layout.COMMON_FILES``
    checkpoint_files: ClassVar[tuple[str, ...]] = ()
    # on-policy distillation (``distill=opd``; None: off), set by ``build_run`` after the
    # constructor: the teacher's signal is the run's (``training.distillation``), not one of
    # the algorithm's ``train_type`` keys; what it changes is in ``task_scores``,
    # ``distill_rewards`` (k1) and ``distill_loss`` (k3, forward_topk)
    distill: DistillSettings | None = None

    def __init__(
        self,
        *,
        group_size: int,
        prompts_per_step: int,
        clip_eps: float,
        kl_coef: float,
        kl_estimator: str,
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

    def task_scores(self, scores: Tensor) -> Tensor:
        """The task's rewards (``[B, G]``, or an episode's ``[B, G, R]`` token scores) as the
        advantages read them: zeros under ``distill.use_task_reward: false`` (distillation
        alone; the ``rollout/*`` reward metrics still report the task's)."""
        if self.distill is not None and not self.distill.use_task_reward:
            return torch.zeros_like(scores)
        return scores

    @torch.no_grad()
    def distill_rewards(self, rollout: Rollout) -> Tensor | None:
        """``[B, G, R]`` the k1 distillation reward ``−coef·(log π_old − log π_T)`` of each
        sampled token of the valid responses (``Rollout.valid_action_mask``: never an
        episode's observations), 0 elsewhere; None without k1 distillation."""
        distill = self.distill
        if distill is None or distill.is_loss:
            return None
        if rollout.teacher_logprobs is None:
            raise ValueError("distill=opd needs the teacher's logprobs pinned on the rollout")
        mask = rollout.valid_action_mask()
        return k1_rewards(
            rollout.logprobs, rollout.teacher_logprobs, mask, distill.coef,
            distill.log_prob_min_clamp,
        )  # fmt: skip

    def distill_advantages(self, rollout: Rollout) -> Tensor | None:
        """``[B, G, R]`` what k1 distillation adds to a critic-free advantage: each token's
        reward, or its reward-to-go with ``distill.discount`` (``rewards_to_go``); None without
        k1 distillation."""
        rewards = self.distill_rewards(rollout)
        if rewards is None:
            return None
        assert self.distill is not None
        return rewards_to_go(rewards, rollout.valid_action_mask(), self.distill.discount)

    def distill_loss(
        self,
        logprobs: Tensor,
        logprobs_at_topk: Tensor | None,
        batch: Minibatch,
        divisors: Divisors | None,
    ) -> tuple[Tensor | None, dict[str, Tensor]]:
        """``distill.coef ×`` the k3 or forward top-k loss over the minibatch's ``loss_mask``
        tokens, aggregated by ``loss_agg`` like the policy loss, and its ``loss/distill``
        metric (unweighted); ``(None, {})`` without a loss estimator."""
        distill = self.distill
        if distill is None or not distill.is_loss:
            return None, {}
        if distill.estimator == "k3":
            assert batch.teacher_logprobs is not None
            terms = k3_loss_terms(
                logprobs, batch.teacher_logprobs, distill.log_prob_min_clamp,
                distill.loss_max_clamp,
            )  # fmt: skip
        else:
            assert logprobs_at_topk is not None and batch.teacher_topk_logprobs is not None
            terms = forward_topk_terms(
                logprobs_at_topk, batch.teacher_topk_logprobs, distill.loss_max_clamp
            )
        loss = aggregate_loss(terms, batch.loss_mask, self.loss_agg, self.norm_len, divisors)
        return distill.coef * loss, {"loss/distill": loss.detach()}

    @abstractmethod
    def prepare(
        self,
        rollout: Rollout,
        models: Mapping[str, nn.Module | None],
        passes: PassPlan,
        sum_over_ranks: SumFn = local_sum,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        """Compute and pin every target the replayed gradient steps optimise; return metrics.

        ``models``: the models of ``requires`` by role. ``passes``: the run's passes, bound to
        the update's first epoch (``PassPlan.through``), which every scoring forward runs
        (``score_reference``, ``passes.score_rollout``, ``passes.scoring_parts``).
        ``sum_over_ranks`` sums a tensor over the data-parallel ranks, so statistics of the
        whole rollout (advantage whitening, logged means) cover every rank's share.
        ``models["reference"]`` None (or absent) skips the reference forward
        (``score_reference``; ``kl_coef`` 0 only): no ``kl/*`` metrics and
        ``rollout.ref_logprobs`` None. ``no_grad``: how the reference's forward turns gradients
        off (``NoGradMode``).
        """

    def score_reference(
        self,
        rollout: Rollout,
        reference: nn.Module | None,
        passes: PassPlan,
        sum_over_ranks: SumFn = local_sum,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        """Pin ``rollout.ref_logprobs`` and return k1/k2/k3 of π_old (``rollout.logprobs``) vs
        the reference (token means over every rank's rollout); the forward runs under
        ``no_grad``, through the update's forwards (``passes.score_rollout``), so that the
        policy the reference was made from reads a KL of exactly 0 against it.

        ``reference`` None (allowed only at ``kl_coef`` 0, where nothing but the ``kl/*``
        metrics reads it): no forward, ``ref_logprobs`` stays None and no metric is returned.
        """
        if reference is None:
            if self.kl_coef != 0:
                raise ValueError("a reference is needed while train_type.kl_coef is nonzero")
            rollout.ref_logprobs = None
            return {}
        rollout.ref_logprobs = passes.score_rollout(reference, rollout, no_grad)
        return kl_metrics(rollout, sum_over_ranks)

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
        aggregation; stats as ``losses.clipped_policy_loss``, and where this forward is π_old
        (``batch.old_logprobs`` None) and the reference was scored, k1/k2/k3 of π_old vs the
        reference (``kl_stats``)."""
        # π_old None: this step's only update, whose own forward (detached) is π_old, as TRL's
        # and verl's on-policy steps: the ratio is exactly 1 in any precision
        old_logprobs = logprobs.detach() if batch.old_logprobs is None else batch.old_logprobs
        loss, stats = clipped_policy_loss(
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
        if batch.old_logprobs is None and batch.ref_logprobs is not None:
            stats |= self.kl_stats(old_logprobs, batch.ref_logprobs, batch.loss_mask, divisors)
        return loss, stats

    @staticmethod
    def kl_stats(
        old_logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, divisors: Divisors | None
    ) -> dict[str, Tensor]:
        """``kl/k1``, ``kl/k2``, ``kl/k3`` of π_old vs the reference, token means over ``mask``
        with the minibatch's ``divisors``: at one update a step π_old exists only as the
        update's own forward, so the KL that ``score_reference`` measures against the engine's
        logprobs is measured here against it (the rounding of the engine's decoding left out:
        exactly 0 while the policy is the reference), and replaces that one in the step's
        metrics. The KL-shaped rewards of PPO and REINFORCE++, made before the update, still
        read the engine's logprobs (behaviour vs reference)."""
        tokens = None if divisors is None else divisors.tokens
        return {
            f"kl/{kind}": masked_mean(
                kl_estimate(old_logprobs, ref_logprobs, kind), mask, token_count=tokens
            )
            for kind in KL_ESTIMATORS
        }

    def clip_metrics(self, stats: dict[str, Tensor]) -> dict[str, Tensor]:
        """``policy/*`` metrics of the clipped surrogate (dual-clip's only when it is on), and
        the ``kl/*`` of π_old where the update measured them (``kl_stats``)."""
        metrics = {"policy/clipfrac": stats["clipfrac"], "policy/approx_kl": stats["approx_kl"]}
        if "dual_clipfrac" in stats:
            metrics["policy/dual_clipfrac"] = stats["dual_clipfrac"]
        metrics |= {name: value for name, value in stats.items() if name.startswith("kl/")}
        return metrics

    def policy_forward(
        self, policy: nn.Module, batch: Minibatch, entropy_grad: bool = False
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """``policy_logprobs``, and under ``distill.estimator: forward_topk`` the policy's
        logprobs ``[M, R, K]`` of the teacher's top-k ids from the same forward (else None)."""
        topk_ids = batch.teacher_topk_ids
        if self.distill is None or self.distill.estimator != "forward_topk" or topk_ids is None:
            return (*self.policy_logprobs(policy, batch, entropy_grad), None)
        logprobs, entropy, at_topk = response_logprobs_at(
            policy,
            batch.prompt_ids,
            batch.prompt_mask,
            batch.response_ids,
            batch.response_mask,
            topk_ids,
            self.sampling.temperature,
            entropy_grad=entropy_grad,
        )
        return logprobs, entropy, at_topk

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


def kl_metrics(rollout: Rollout, sum_over_ranks: SumFn = local_sum) -> dict[str, float]:
    """``kl/k1``, ``kl/k2``, ``kl/k3``: each estimator of KL(π_sampled ‖ π_ref), its mean over
    the rollout's action tokens on every rank (``rollout.ref_logprobs`` scored)."""
    assert rollout.ref_logprobs is not None
    mask = rollout.action_mask()
    return {
        f"kl/{kind}": masked_global_mean(
            kl_estimate(rollout.logprobs, rollout.ref_logprobs, kind), mask, sum_over_ranks
        ).item()
        for kind in KL_ESTIMATORS
    }


def _one_of(key: str, value: object, choices: tuple[str, ...], where: str = "") -> None:
    """``train_type.<key> must be one of a, b, c[ for ...] (got 'x')``, a ``ValueError``."""
    if value not in choices:
        raise ValueError(
            f"train_type.{key} must be one of {', '.join(choices)}{where} (got {value!r})"
        )
