"""Checks of the ``train_type`` node: the strategy class, rollout and update shapes, clipping
and KL, sampling, the optimizer, and the algorithm options of ``docs/algorithms.md``; one clear
message naming the key."""

from __future__ import annotations

import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig

from astrai.algorithms.strategy import Strategy
from astrai.config.errors import ConfigError, first_line, require
from astrai.config.ranges import (
    MAX_EPOCHS,
    MAX_RESAMPLE_ROUNDS,
    MAX_ROLLOUT_SEQUENCES,
    check_betas,
    check_large,
    check_number,
    check_token_budget,
)


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
    try:
        get_class(node._target_)
    except Exception as err:
        raise ConfigError(f"{key}._target_ {node.get('_target_')!r} cannot be imported") from err
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


def strategy_class_of(tt: DictConfig) -> type[Strategy]:
    """The ``Strategy`` class ``train_type._target_`` names; a ``ConfigError`` otherwise."""
    try:
        cls = get_class(tt._target_)
    except Exception as err:
        raise ConfigError(f"train_type._target_ {tt._target_!r} cannot be imported") from err
    require(
        isinstance(cls, type) and issubclass(cls, Strategy),
        f"train_type._target_ {tt._target_!r} is not an astrai Strategy",
    )
    return cls


def validate_train_type(tt: DictConfig, critic: DictConfig, allow_large: bool = False) -> None:
    strategy = strategy_class_of(tt)
    if strategy.requires_critic:
        require(
            critic.name != "none",
            f"train_type={strategy.name} needs a critic: use critic=value_model "
            f"(got critic={critic.name})",
        )
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
    if not strategy.requires_critic:
        require(
            critic.name == "none",
            f"train_type={strategy.name} uses no critic: use critic=none "
            f"(got critic={critic.name})",
        )
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


def build_strategy(tt: DictConfig) -> Strategy:
    """The strategy ``train_type`` names, built as the trainer builds it: what its constructor
    refuses (a choice not among its own, a group smaller than it accepts) is one ConfigError
    line with the constructor's own message."""
    try:
        strategy: Strategy = instantiate(tt)
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
