"""Checks of the ``train_type`` node: the strategy class, rollout and update shapes, clipping
and KL, sampling, the optimizer, and the algorithm options of ``docs/algorithms.md``; one clear
message naming the key."""

from __future__ import annotations

from hydra.utils import get_class
from omegaconf import DictConfig

from astrai.algorithms.advantages import ADVANTAGE_SCALES
from astrai.algorithms.aggregation import LOSS_AGG_MODES
from astrai.algorithms.kl import KL_ESTIMATORS
from astrai.algorithms.losses import RATIO_LEVELS
from astrai.algorithms.strategy import Strategy
from astrai.config.errors import ConfigError, require


def _check_optimizer(node: DictConfig, key: str) -> None:
    require(
        node.get("_partial_") is True,
        f"{key} must be a _partial_ optimizer (set {key}._partial_=true)",
    )
    lr = node.get("lr")
    require(
        isinstance(lr, int | float) and not isinstance(lr, bool) and lr > 0,
        f"{key}.lr must be a number > 0 (got {lr!r})",
    )
    try:
        get_class(node._target_)
    except Exception as err:
        raise ConfigError(f"{key}._target_ {node.get('_target_')!r} cannot be imported") from err


def _strategy_class(tt: DictConfig) -> type[Strategy]:
    try:
        cls = get_class(tt._target_)
    except Exception as err:
        raise ConfigError(f"train_type._target_ {tt._target_!r} cannot be imported") from err
    require(
        isinstance(cls, type) and issubclass(cls, Strategy),
        f"train_type._target_ {tt._target_!r} is not an astrai Strategy",
    )
    return cls


def validate_train_type(tt: DictConfig, critic: DictConfig) -> None:
    strategy = _strategy_class(tt)
    if strategy.requires_critic:
        require(
            critic.name != "none",
            f"train_type={strategy.name} needs a critic: use critic=value_model "
            f"(got critic={critic.name})",
        )
        for key in ("ppo_gamma", "ppo_gae_lambda"):
            require(0 <= tt[key] <= 1, f"train_type.{key} must be in [0, 1] (got {tt[key]})")
        require(tt.ppo_vf_coef >= 0, f"train_type.ppo_vf_coef must be >= 0 ({tt.ppo_vf_coef})")
        require(
            tt.value_clip is None or tt.value_clip > 0,
            f"train_type.value_clip must be null or > 0 (got {tt.value_clip})",
        )
        require(
            critic.optimizer.lr > 0, f"critic.optimizer.lr must be > 0 (got {critic.optimizer.lr})"
        )
    else:
        require(
            critic.name == "none",
            f"train_type={strategy.name} uses no critic: use critic=none "
            f"(got critic={critic.name})",
        )
        require(
            tt.group_size >= 2,
            f"train_type.group_size must be >= 2 for {strategy.name} (got {tt.group_size})",
        )
    require(tt.group_size >= 1, f"train_type.group_size must be >= 1 (got {tt.group_size})")
    require(tt.prompts_per_step >= 1, "train_type.prompts_per_step must be >= 1")
    require(tt.ppo_epochs >= 1, f"train_type.ppo_epochs must be >= 1 (got {tt.ppo_epochs})")
    require(tt.minibatches >= 1, f"train_type.minibatches must be >= 1 (got {tt.minibatches})")
    require(
        tt.micro_batch_size is None or tt.micro_batch_size >= 1,
        f"train_type.micro_batch_size must be null or >= 1 (got {tt.micro_batch_size})",
    )
    rollout_size = tt.prompts_per_step * tt.group_size
    require(
        rollout_size % tt.minibatches == 0,
        f"train_type.minibatches ({tt.minibatches}) must divide prompts_per_step × group_size "
        f"({rollout_size})",
    )
    require(tt.clip_eps > 0, f"train_type.clip_eps must be > 0 (got {tt.clip_eps})")
    _validate_algorithm_options(tt, strategy)
    require(tt.kl_coef >= 0, f"train_type.kl_coef must be >= 0 (got {tt.kl_coef})")
    require(
        tt.kl_estimator in KL_ESTIMATORS,
        f"train_type.kl_estimator must be one of {', '.join(KL_ESTIMATORS)} "
        f"(got {tt.kl_estimator!r})",
    )
    s = tt.sampling
    require(s.max_new_tokens >= 1, "train_type.sampling.max_new_tokens must be >= 1")
    require(s.temperature > 0, "train_type.sampling.temperature must be > 0 for training")
    require(s.top_k >= 0, f"train_type.sampling.top_k must be >= 0 (got {s.top_k})")
    require(0 < s.top_p <= 1, f"train_type.sampling.top_p must be in (0, 1] (got {s.top_p})")
    _check_optimizer(tt.optimizer, "train_type.optimizer")
    require(tt.scheduler.warmup_steps >= 0, "train_type.scheduler.warmup_steps must be >= 0")


def _validate_algorithm_options(tt: DictConfig, strategy: type[Strategy]) -> None:
    """The options of ``docs/algorithms.md``: names from their lists, ranges that make sense."""
    require(
        tt.advantage in strategy.ADVANTAGES,
        f"train_type.advantage must be one of {', '.join(strategy.ADVANTAGES)} for "
        f"train_type={strategy.name} (got {tt.advantage!r})",
    )
    require(
        tt.loss_agg in LOSS_AGG_MODES,
        f"train_type.loss_agg must be one of {', '.join(LOSS_AGG_MODES)} (got {tt.loss_agg!r})",
    )
    require(
        tt.ratio_level in RATIO_LEVELS,
        f"train_type.ratio_level must be one of {', '.join(RATIO_LEVELS)} (got {tt.ratio_level!r})",
    )
    low, high = tt.clip_eps_low, tt.clip_eps_high
    require(
        low is None or 0 < low < 1,
        f"train_type.clip_eps_low must be null or in (0, 1) (got {low})",
    )
    require(high is None or high > 0, f"train_type.clip_eps_high must be null or > 0 ({high})")
    require(
        tt.clip_ratio_c is None or tt.clip_ratio_c > 1,
        f"train_type.clip_ratio_c must be null or > 1 (got {tt.clip_ratio_c})",
    )
    require(
        tt.max_resample_rounds >= 0,
        f"train_type.max_resample_rounds must be >= 0 (got {tt.max_resample_rounds})",
    )
    if "scale_rewards" in tt:
        require(
            tt.scale_rewards in ADVANTAGE_SCALES,
            f"train_type.scale_rewards must be one of {', '.join(ADVANTAGE_SCALES)} "
            f"(got {tt.scale_rewards!r})",
        )
        require(
            tt.scale_rewards == "group" or tt.advantage == "grpo",
            f"train_type.scale_rewards={tt.scale_rewards} applies to advantage=grpo only "
            f"(got advantage={tt.advantage})",
        )


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
