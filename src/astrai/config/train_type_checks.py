"""Checks of the ``train_type`` node: the strategy class, rollout and update shapes, clipping
and KL, sampling, the optimizer, and the algorithm options of ``docs/algorithms.md``; one clear
message naming the key."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from astrai.algorithms.strategy import Strategy
from astrai.config.errors import ConfigError, first_line, require
from astrai.config.keys import unknown_key_message
from astrai.config.ranges import (
    MAX_EPOCHS,
    MAX_RESAMPLE_ROUNDS,
    MAX_ROLLOUT_SEQUENCES,
    check_betas,
    check_large,
    check_number,
    check_token_budget,
)
from astrai.config.store import strategy_schema
from astrai.imports import import_target


def _check_optimizer(node: DictConfig, key: str) -> torch.optim.Optimizer:
    """The optimizer's known keys (any ``torch.optim`` class may stand in for AdamW), then the
    optimizer built on one parameter: what ``torch.optim`` rejects, it rejects here."""
    require(
        node.get("_partial_") is True,
        f"{key} must be a _partial_ optimizer (set {key}._partial_=true)",
    )
    check_number(node.get("lr"), f"{key}.lr", 0, low_open=True)
    if "betas" in node:
        check_betas(node.betas, f"{key}.betas")
    if "weight_decay" in node:
        check_number(node.weight_decay, f"{key}.weight_decay", 0)
    if "eps" in node:
        check_number(node.eps, f"{key}.eps", 0, low_open=True)
    if "momentum" in node:
        check_number(node.momentum, f"{key}.momentum", 0, 1, high_open=True)
    import_target(node.get("_target_"), f"{key}._target_", error=ConfigError)
    try:
        return instantiate(node)([torch.nn.Parameter(torch.zeros(1))])
    except Exception as err:
        raise ConfigError(f"{key}: {first_line(err.__cause__ or err)}") from err


def _check_scheduler(
    node: DictConfig, optimizer: torch.optim.Optimizer, key: str = "train_type.scheduler"
) -> None:
    check_number(node.get("warmup_steps"), f"{key}.warmup_steps", 0, integer=True)
    if "min_lr_ratio" in node:
        check_number(node.min_lr_ratio, f"{key}.min_lr_ratio", 0, 1)
    try:
        instantiate(node)(optimizer, total_steps=1)
    except Exception as err:
        raise ConfigError(f"{key}: {first_line(err.__cause__ or err)}") from err


def strategy_class_of(tt: Mapping[str, Any]) -> type[Strategy]:
    """The ``Strategy`` class ``train_type._target_`` names (the algorithm is its class: no
    registry); a ``ConfigError`` naming the key otherwise."""
    return import_target(  # type: ignore[no-any-return]
        tt.get("_target_"),
        "train_type._target_",
        Strategy,
        "an astrai Strategy (a subclass of astrai.algorithms.strategy.Strategy)",
        error=ConfigError,
    )


def check_strategy_keys(cls: type[Strategy], tt: DictConfig) -> None:
    """The node's keys and types against ``cls``'s schema (``config.store.strategy_schema``:
    its constructor's keywords): a YAML outside ``conf/`` composes untyped, so a typo or a
    wrong type is caught here, one line naming the key, as an engine's is."""
    schema = strategy_schema(cls)
    known = [f"train_type.{f.name}" for f in dataclasses.fields(schema)]
    unknown = [f"train_type.{key!s}" for key in tt.keys() if f"train_type.{key!s}" not in known]
    if unknown:
        raise ConfigError(unknown_key_message(unknown[0], known))
    try:
        OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.to_container(tt))
    except OmegaConfBaseException as err:
        reason = str(err).splitlines()[0]
        raise ConfigError(f"train_type.{err.full_key or ''}: {reason}") from None


def validate_train_type(tt: DictConfig, critic: DictConfig, allow_large: bool = False) -> None:
    """The ``train_type`` node and, where its strategy requires a critic, the critic's
    optimizer and schedule (whether the models it requires are given: ``role_checks``)."""
    strategy = strategy_class_of(tt)
    check_strategy_keys(strategy, tt)
    if "critic" in strategy.requires and critic.name != "none":
        critic_optimizer = _check_optimizer(critic.optimizer, "critic.optimizer")
        scheduler = critic.get("scheduler")
        require(
            scheduler is None or (isinstance(scheduler, DictConfig) and "_target_" in scheduler),
            "critic.scheduler must be a scheduler node (default: ${train_type.scheduler}, the "
            f"policy's) or null for a constant learning rate (got {scheduler!r})",
        )
        if scheduler is not None:
            _check_scheduler(scheduler, critic_optimizer, "critic.scheduler")
    # PPO's knobs, wherever an algorithm has them
    for key in ("ppo_gamma", "ppo_gae_lambda"):
        if key in tt:
            check_number(tt[key], f"train_type.{key}", 0, 1)
    if "ppo_vf_coef" in tt:
        check_number(tt.ppo_vf_coef, "train_type.ppo_vf_coef", 0)
    if "value_clip" in tt:
        check_number(tt.value_clip, "train_type.value_clip", 0, low_open=True, optional=True)
    _check_shape(tt, allow_large)
    check_number(tt.clip_eps, "train_type.clip_eps", 0, low_open=True)
    _check_option_ranges(tt)
    check_number(tt.kl_coef, "train_type.kl_coef", 0)
    if "adv_eps" in tt:
        check_number(tt.adv_eps, "train_type.adv_eps", 0, low_open=True)
    if "entropy_coef" in tt:
        check_number(tt.entropy_coef, "train_type.entropy_coef", 0)
    _check_sampling(tt.sampling)
    build_strategy(tt)  # its names and facts (advantage, loss_agg, group_size...): its own checks
    optimizer = _check_optimizer(tt.optimizer, "train_type.optimizer")
    _check_scheduler(tt.scheduler, optimizer)


def _check_shape(tt: DictConfig, allow_large: bool) -> None:
    """The rollout and update shapes: counts >= 1, a rollout the machine can hold."""
    check_number(tt.group_size, "train_type.group_size", 1, integer=True)
    check_number(tt.prompts_per_step, "train_type.prompts_per_step", 1, integer=True)
    check_number(tt.ppo_epochs, "train_type.ppo_epochs", 1, integer=True)
    check_number(tt.minibatches, "train_type.minibatches", 1, integer=True)
    check_number(tt.micro_batch_size, "train_type.micro_batch_size", 1, integer=True, optional=True)
    check_token_budget(tt.score_tokens, "train_type.score_tokens")
    check_token_budget(tt.update_tokens, "train_type.update_tokens")
    rollout_size = tt.prompts_per_step * tt.group_size
    check_large(
        rollout_size,
        MAX_ROLLOUT_SEQUENCES,
        "train_type.prompts_per_step × group_size (sequences per step)",
        allow_large,
    )
    check_large(tt.ppo_epochs, MAX_EPOCHS, "train_type.ppo_epochs", allow_large)
    require(
        rollout_size % tt.minibatches == 0,
        f"train_type.minibatches ({tt.minibatches}) must divide prompts_per_step × group_size "
        f"({rollout_size})",
    )


def _check_sampling(s: DictConfig) -> None:
    key = "train_type.sampling"
    check_number(s.max_new_tokens, f"{key}.max_new_tokens", 1, integer=True)
    check_number(s.temperature, f"{key}.temperature", 0, low_open=True)
    check_number(s.top_k, f"{key}.top_k", 0, integer=True)
    check_number(s.top_p, f"{key}.top_p", 0, 1, low_open=True)
    check_token_budget(s.max_cache_tokens, f"{key}.max_cache_tokens")


def _check_option_ranges(tt: DictConfig) -> None:
    """The numeric options of ``docs/algorithms.md``: ranges that make sense (the named choices
    are the strategy's own to check, ``build_strategy``)."""
    low, high = tt.clip_eps_low, tt.clip_eps_high
    key = "train_type.clip_eps"
    check_number(low, f"{key}_low", 0, 1, low_open=True, high_open=True, optional=True)
    check_number(high, f"{key}_high", 0, low_open=True, optional=True)
    check_number(tt.clip_ratio_c, "train_type.clip_ratio_c", 1, low_open=True, optional=True)
    rounds = tt.max_resample_rounds
    check_number(rounds, "train_type.max_resample_rounds", 0, integer=True)
    require(
        rounds <= MAX_RESAMPLE_ROUNDS,
        f"train_type.max_resample_rounds must be at most {MAX_RESAMPLE_ROUNDS} (got {rounds})",
    )


# ``train_type`` keys that are the run's, not the algorithm's: the batch shape, which
# ``training.plan.step_plan`` reads (``ppo_epochs`` and the ``algorithms.pass_plan.PassPlan``),
# and the lag, which ``astrai.policy_lag.lag_plan`` reads. Users set them as ``train_type.<key>``
# (``schema.StrategyConfig`` types them); the strategy's constructor never sees them.
RUN_KEYS = (
    "ppo_epochs",
    "minibatches",
    "micro_batch_size",
    "score_tokens",
    "update_tokens",
    "max_policy_lag",
)


def strategy_node(tt: DictConfig) -> DictConfig:
    """``train_type`` without ``RUN_KEYS``: what ``instantiate`` builds the strategy from (a
    copy; ``tt`` itself keeps every key)."""
    node = tt.copy()
    with open_dict(node):
        for key in RUN_KEYS:
            node.pop(key, None)
    return node


def build_strategy(tt: DictConfig) -> Strategy:
    """The strategy ``train_type`` names, built as the trainer builds it (``strategy_node``):
    what its constructor refuses (a choice not among its own, a group smaller than it accepts)
    is one ConfigError line with the constructor's own message."""
    try:
        strategy: Strategy = instantiate(strategy_node(tt))
    except Exception as err:  # hydra wraps the constructor's ValueError
        cause = err.__cause__ or err
        if not isinstance(cause, ValueError):
            raise
        raise ConfigError(first_line(cause)) from err
    return strategy


def check_world_batch(tt: DictConfig, world_size: int) -> None:
    """Every rank gets ``prompts_per_step / world_size`` whole prompt groups, split into
    ``minibatches`` equal parts."""
    require(
        tt.prompts_per_step % world_size == 0,
        f"train_type.prompts_per_step ({tt.prompts_per_step}) must be divisible by the number "
        f"of processes ({world_size}: infra.nproc_per_node × infra.nnodes)",
    )
    per_rank = tt.prompts_per_step // world_size * tt.group_size
    require(
        per_rank % tt.minibatches == 0,
        f"train_type.minibatches ({tt.minibatches}) must divide each process's "
        f"{per_rank} sequences (prompts_per_step / processes × group_size)",
    )
