"""Dataclass schemas for every config group, so typos and wrong types fail at compose time.

Each YAML option in ``conf/<group>/`` starts from one of these
(``defaults: [/schema/<group>/base_<name>@_here_]``, registered by ``store.py``).
The schemas hold types only: every value, with its comment, lives in the YAML (one home per
knob; ``tests/config/test_one_home.py`` walks every option to keep it so). Fields OmegaConf
cannot type (``"all"`` or a list of ints) are ``Any`` and checked in ``validate.py``.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

from omegaconf import MISSING

from astrai.config.distill_schema import TeacherConfig
from astrai.models.llama import LlamaConfig
from astrai.rollout.engines.engine import Engine, TorchEngine
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.engines.seeded_vllm import SeededVLLM


def types_only(cls: type, name: str, **extra: type) -> type:
    """A schema with ``cls``'s field names and types (and ``extra`` ones), every value
    ``MISSING``, plus a ``_target_``: the class's own defaults never compete with the YAML's."""
    typed = [(f.name, f.type, field(default=MISSING)) for f in fields(cls)]
    typed += [(key, kind, field(default=MISSING)) for key, kind in extra.items()]
    schema = make_dataclass(name, [("_target_", str, field(default=MISSING)), *typed])
    schema.__module__ = __name__
    return schema


SamplingConfigSchema = types_only(SamplingConfig, "SamplingConfigSchema")


@dataclass
class LoraSchema:
    """``model.lora``: LoRA adapters through PEFT (``astrai.models.lora.LoraSettings``);
    ``rank: null`` is full fine-tuning."""

    rank: int | None = MISSING
    alpha: float = MISSING
    dropout: float = MISSING
    target_modules: Any = MISSING  # "all-linear" or a list of module names
    use_rslora: bool = MISSING
    use_dora: bool = MISSING


# ``model=<preset>``: HF key names, plus build_llama's gradient_checkpointing and the adapters
ModelConfig = types_only(LlamaConfig, "ModelConfig", gradient_checkpointing=bool, lora=LoraSchema)


@dataclass
class WarmupConstantConfig:
    """``scheduler=warmup_constant``."""

    _target_: str = MISSING
    _partial_: bool = MISSING
    warmup_steps: int = MISSING


@dataclass
class WarmupCosineConfig(WarmupConstantConfig):
    """``scheduler=warmup_cosine``."""

    min_lr_ratio: float = MISSING


@dataclass
class StrategyConfig:
    """Knobs every ``train_type`` shares: rollout shape, update shape, clipping, KL, optimizer.
    Each algorithm's own knobs come on top, derived from its constructor
    (``config.store.strategy_schema``). The batch shape (``ppo_epochs``, ``minibatches``,
    ``micro_batch_size``, ``score_tokens``, ``update_tokens``) and ``max_policy_lag`` are the
    run's, set here as ``train_type.<key>`` but read by ``training.plan.step_plan`` and
    ``astrai.policy_lag.lag_plan``, not by the strategy's constructor
    (``train_type_checks.RUN_KEYS``).

    ``optimizer`` is untyped on purpose: any ``torch.optim`` class with its own keyword
    arguments may replace AdamW (``validate.py`` checks ``lr``); ``scheduler`` is either
    scheduler option.
    """

    _target_: str = MISSING
    group_size: int = MISSING
    prompts_per_step: int = MISSING
    ppo_epochs: int = MISSING
    minibatches: int = MISSING
    micro_batch_size: int | None = MISSING
    clip_eps: float = MISSING
    kl_coef: float = MISSING
    kl_estimator: str = MISSING
    advantage: str = MISSING
    loss_agg: str = MISSING
    clip_eps_low: float | None = MISSING
    clip_eps_high: float | None = MISSING
    clip_ratio_c: float | None = MISSING
    ratio_level: str = MISSING
    mask_truncated: bool = MISSING
    filter_groups: bool = MISSING
    max_resample_rounds: int = MISSING
    max_policy_lag: int = MISSING
    score_tokens: Any = MISSING  # auto, null or a count (models.pass_memory)
    update_tokens: Any = MISSING  # auto, null or a count (models.pass_memory)
    sampling: SamplingConfigSchema = field(default_factory=SamplingConfigSchema)  # type: ignore[valid-type]
    optimizer: Any = MISSING
    scheduler: Any = MISSING


@dataclass
class HFModelConfig:
    """``model=hf model.path=<dir>``: a local Hugging Face model directory (Llama family)."""

    _target_: str = MISSING
    path: str = MISSING  # config.json, model.safetensors, tokenizer.json, tokenizer_config.json
    chat_template: bool = MISSING
    # extra chat-template variables, as apply_chat_template(**kwargs) (Qwen3's enable_thinking);
    # open to new keys without + (``store.FREE_MAPS``): model.chat_template_kwargs={k: v}
    chat_template_kwargs: dict[str, Any] = MISSING
    gradient_checkpointing: bool = MISSING
    lora: LoraSchema = MISSING


@dataclass
class EngineConfig:
    """The keys of every ``engine`` node: the class that samples (``_target_``, an
    ``rollout.engines.engine.Engine``), where π_old comes from and the mismatch correction
    (``algorithms.correction``). An engine's own knobs come on top (``engine_schema``)."""

    _target_: str = MISSING
    old_logprobs: str = MISSING
    correction: str = MISSING
    correction_low: float | None = MISSING
    correction_high: float | None = MISSING


def engine_schema(cls: type[Engine]) -> type:
    """``schema/engine/base_<name>``: ``EngineConfig``'s keys plus the engine's own knobs
    (``cls.Config``'s fields, typed by their annotations), every value ``MISSING`` (the YAML
    holds them): an engine's knobs have one home, its ``Config``."""
    hints = typing.get_type_hints(cls.Config)
    own = [(f.name, hints[f.name], field(default=MISSING)) for f in fields(cls.Config)]
    derived = make_dataclass(f"{cls.__name__}Schema", own, bases=(EngineConfig,))
    derived.__module__ = __name__
    derived.__doc__ = f"``engine={cls.name}`` ({cls.__module__}.{cls.__qualname__})."
    return derived


TorchEngineSchema = engine_schema(TorchEngine)
VLLMEngineSchema = engine_schema(SeededVLLM)


@dataclass
class CollectorConfig:
    """The key of every ``collector`` node: the class that collects rollouts and held-out
    answers (``_target_``, an ``rollout.collectors.Collector``; null: ``auto``, the one that fits
    ``env``). A collector's own keys (its constructor's keyword-only arguments) come in YAML
    files of its own, checked against its constructor (``config.collector_checks``)."""

    _target_: str | None = MISSING


@dataclass
class CriticConfig:
    """``critic=none``: no value model (GRPO needs none)."""

    name: str = MISSING


@dataclass
class ValueModelConfig(CriticConfig):
    """``critic=value_model``: the policy's trunk + a zero-initialised scalar head."""

    warm_start: bool = MISSING
    optimizer: Any = MISSING
    scheduler: Any = MISSING  # a scheduler node (default: the policy's) or null (constant)


@dataclass
class AdditionTaskConfig:
    _target_: str = MISSING
    num_digits: int = MISSING
    num_digits_b: int | None = MISSING
    eval_fraction: float = MISSING


@dataclass
class ReverseTaskConfig:
    _target_: str = MISSING
    min_len: int = MISSING
    max_len: int = MISSING
    eval_fraction: float = MISSING


@dataclass
class SortTaskConfig(ReverseTaskConfig):
    pass


@dataclass
class ProductTaskConfig:
    _target_: str = MISSING
    num_digits: int = MISSING
    min_operand: int | None = MISSING
    eval_fraction: float = MISSING


@dataclass
class HiddenNumberTaskConfig:
    _target_: str = MISSING
    max_number: int = MISSING
    eval_fraction: float = MISSING


@dataclass
class DatasetTaskConfig:
    _target_: str = MISSING
    train_path: str = MISSING
    eval_path: str | None = MISSING
    eval_fraction: float = MISSING
    prompt_key: str = MISSING
    answer_key: str | None = MISSING
    system_prompt: str | None = MISSING  # a default: a row's own system turn wins
    filter_overlong_prompts: bool = MISSING  # drop rows too long for the run, not refuse it
    teacher_key: str | None = MISSING  # the column naming each row's teacher (teacher.paths)


@dataclass
class RewardConfig:
    """A built-in reward (``conf/reward/``); ``reward=custom`` is untyped, for a user's own."""

    _target_: str = MISSING
    name: str | None = MISSING
    accuracy_threshold: float = MISSING
    overlong_buffer: int | None = MISSING  # DAPO soft overlong penalty (training rollouts only)
    overlong_penalty: float = MISSING
    timeout_s: float | None = MISSING  # seconds per term call on a batch; None = no bound
    timeout_score: float = MISSING  # a response whose reward timed out scores this


@dataclass
class RegexRewardConfig(RewardConfig):
    pattern: str = MISSING


@dataclass
class LengthRewardConfig(RewardConfig):
    target: int = MISSING


@dataclass
class RewardModelConfig(RewardConfig):
    path: str = MISSING
    batch_size: int = MISSING


@dataclass
class WeightedRewardConfig:
    accuracy_threshold: float = MISSING
    overlong_buffer: int | None = MISSING  # on the whole reward, not on a term
    overlong_penalty: float = MISSING
    timeout_s: float | None = MISSING  # on the whole reward: seconds per term call
    timeout_score: float = MISSING  # on the whole reward: a timed-out response's score
    terms: list[Any] = MISSING  # reward nodes, each with name and weight


@dataclass
class GPUConfig:
    devices: Any = MISSING  # "all" or a list of GPU indices (astrai.config.devices)


@dataclass
class ContainerConfig:
    """How the Docker launcher's container runs; ``stop_grace_period`` is also how long a
    multi-process run's workers get to checkpoint after SIGTERM on the host."""

    image: str = MISSING
    shm_size: str = MISSING
    ipc: str = MISSING
    stop_grace_period: str = MISSING
    log_max_size: str = MISSING  # the json-file log's max-size, e.g. "50m"
    log_max_file: int = MISSING  # ... and max-file


@dataclass
class MountsConfig:
    """Host folders mounted at /data, /models and /outputs (relative = to the repo root)."""

    data: str = MISSING
    models: str = MISSING
    outputs: str = MISSING


@dataclass
class InfraConfig:
    name: str = MISSING
    device: str = MISSING
    gpu: GPUConfig = field(default_factory=GPUConfig)
    nproc_per_node: Any = MISSING  # "auto" or a positive int
    nnodes: int = MISSING
    node_rank: int = MISSING
    rdzv_endpoint: str | None = MISSING
    rdzv_id: str | None = MISSING
    parallel: str = MISSING
    precision: str = MISSING  # fp32 | bf16
    offload_reference: bool = MISSING
    num_threads: Any = MISSING  # "auto" or a positive int (astrai.config.threads)
    container: ContainerConfig = field(default_factory=ContainerConfig)
    mounts: MountsConfig = field(default_factory=MountsConfig)
    environment: dict[str, str] = MISSING


@dataclass
class WandbConfig:
    """``logger=wandb`` (conf/logger/wandb.yaml)."""

    project: str = MISSING
    entity: str | None = MISSING
    name: str | None = MISSING
    tags: list[str] = MISSING
    group: str | None = MISSING
    mode: str | None = MISSING  # online | offline | disabled | null (W&B's own: WANDB_MODE)
    dir: str | None = MISSING


@dataclass
class MlflowConfig:
    """``logger=mlflow`` (conf/logger/mlflow.yaml)."""

    tracking_uri: str | None = MISSING
    experiment: str = MISSING
    run_name: str | None = MISSING


@dataclass
class LoggerConfig:
    """conf/logger_base.yaml, then the options of ``logger`` (several at once:
    ``logger=[tensorboard,wandb,mlflow]``); each option sets only its own keys."""

    tensorboard: bool = MISSING
    samples_every: int = MISSING
    num_samples: int = MISSING
    flush_secs: int = MISSING
    kl_every: int = MISSING
    wandb: WandbConfig | None = MISSING  # null: not selected
    mlflow: MlflowConfig | None = MISSING  # null: not selected


@dataclass
class TrainerConfig:
    total_steps: int = MISSING
    eval_every: int = MISSING
    eval_prompts: int = MISSING
    max_grad_norm: float = MISSING
    max_nonfinite_updates: int = MISSING  # skipped optimizer steps in a row (training.nonfinite)
    progress_bar: bool = MISSING
    max_duration: Any = MISSING  # "90m", "2h", seconds, or null
    stop_at: Any = MISSING  # null or {metric: bound} (metrics.targets)
    allow_large: bool = MISSING  # lift the upper bounds of astrai.config.ranges


@dataclass
class CheckpointConfig:
    every_steps: int = MISSING
    keep_last: int = MISSING
    background: bool = MISSING  # write mid-run saves on a thread after a host copy
    resume: Any = MISSING  # "auto", a checkpoint path, or null
    # fingerprint keys allowed to differ from the resumed checkpoint's (checkpoints/identity.py)
    allow_changes: list[str] = MISSING
    resume_schedule: str = MISSING  # rescale | keep (validate.RESUME_SCHEDULES)


@dataclass
class TrainConfig:
    """The root config (``conf/train.yaml``)."""

    train_type: Any = MISSING
    model: Any = MISSING
    engine: Any = MISSING
    critic: Any = MISSING
    task: Any = MISSING
    reward: Any = MISSING
    env: Any = MISSING  # an environment (multi-turn episodes) or single_turn (its _target_ null)
    collector: Any = MISSING  # how rollouts are collected (CollectorConfig; auto: by env)
    infra: Any = MISSING
    logger: Any = MISSING
    seed: int = MISSING
    optimized_metric: str = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ckpt: CheckpointConfig = field(default_factory=CheckpointConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    distill: Any = MISSING  # on-policy distillation (distill_schema.DistillConfig; none: off)
