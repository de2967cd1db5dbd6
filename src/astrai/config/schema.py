"""Dataclass schemas for every config group, so typos and wrong types fail at compose time.

Each YAML option in ``conf/<group>/`` starts from one of these (``defaults: [base_<name>]``).
Fields OmegaConf cannot type (``"all"`` or a list of ints) are ``Any`` and checked in
``validate.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from astrai.models.llama import LlamaConfig
from astrai.rollout.sampler import SamplingConfig


@dataclass
class SamplingConfigSchema(SamplingConfig):
    """``train_type.sampling``: the sampler's own dataclass plus its Hydra target."""

    _target_: str = "astrai.rollout.sampler.SamplingConfig"


def _adamw(weight_decay: float) -> dict[str, Any]:
    """Default optimizer node. Untyped on purpose: any ``torch.optim`` class with its own
    keyword arguments may replace it (``validate.py`` checks ``lr``)."""
    return {
        "_target_": "torch.optim.AdamW",
        "_partial_": True,
        "lr": 1e-3,
        "betas": [0.9, 0.99],
        "weight_decay": weight_decay,
    }


@dataclass
class SchedulerConfig:
    _target_: str = "astrai.training.optim.warmup_cosine"
    _partial_: bool = True
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0


@dataclass
class StrategyConfig:
    """Knobs every ``train_type`` shares: rollout shape, update shape, clipping, KL, optimizer."""

    _target_: str = MISSING
    group_size: int = 8
    prompts_per_step: int = 64
    ppo_epochs: int = 2
    minibatches: int = 4
    clip_eps: float = 0.2
    kl_coef: float = 0.05
    kl_estimator: str = "k3"
    sampling: SamplingConfigSchema = field(default_factory=SamplingConfigSchema)
    optimizer: Any = field(default_factory=lambda: _adamw(weight_decay=0.1))
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)


@dataclass
class GRPOConfig(StrategyConfig):
    """``train_type=online_grpo``: group-normalised advantages, KL in the loss."""

    _target_: str = "astrai.algorithms.grpo.GRPOStrategy"
    adv_eps: float = 1e-6


@dataclass
class PPOConfig(StrategyConfig):
    """``train_type=online_ppo``: GAE over KL-penalised token rewards with a critic."""

    _target_: str = "astrai.algorithms.ppo.PPOStrategy"
    ppo_gamma: float = 1.0
    ppo_gae_lambda: float = 0.95
    ppo_vf_coef: float = 0.5
    value_clip: float | None = None
    whiten_advantages: bool = True
    entropy_coef: float = 0.0


@dataclass
class ModelConfig(LlamaConfig):
    """``model=<preset>``: Hugging Face ``LlamaConfig`` key names."""

    _target_: str = "astrai.models.llama.build_llama"


@dataclass
class HFModelConfig:
    """``model=hf model.path=<dir>``: a local Hugging Face model directory (Llama family)."""

    _target_: str = "astrai.models.pretrained.load_pretrained_policy"
    path: str = MISSING  # config.json, model.safetensors, tokenizer.json, tokenizer_config.json
    chat_template: bool = True  # render task prompts through the model's chat template


@dataclass
class CriticConfig:
    """``critic=none``: no value model (GRPO needs none)."""

    name: str = "none"


@dataclass
class ValueModelConfig(CriticConfig):
    """``critic=value_model``: the policy's trunk + a zero-initialised scalar head."""

    name: str = "value_model"
    warm_start: bool = True  # copy the policy's trunk weights at the start
    optimizer: Any = field(default_factory=lambda: _adamw(weight_decay=0.0))


@dataclass
class AdditionTaskConfig:
    _target_: str = "astrai.tasks.arithmetic.AdditionTask"
    num_digits: int = 1
    num_digits_b: int | None = None  # digits of the second operand; None = num_digits
    eval_fraction: float = 0.2


@dataclass
class ReverseTaskConfig:
    _target_: str = "astrai.tasks.strings.ReverseTask"
    min_len: int = 3
    max_len: int = 4
    eval_fraction: float = 0.1


@dataclass
class SortTaskConfig(ReverseTaskConfig):
    _target_: str = "astrai.tasks.strings.SortTask"


@dataclass
class GPUConfig:
    devices: Any = "all"  # "all" or a list of distinct non-negative physical GPU indices


@dataclass
class ContainerConfig:
    """How the Docker launcher's container runs (ignored by ``infra=local``)."""

    image: str = "astrai:latest"  # built only by `make docker-build`; never built by a run
    shm_size: str = "16gb"  # /dev/shm for DataLoader workers and NCCL
    ipc: str = "host"  # IPC namespace (NCCL's shared-memory transport wants host)
    stop_grace_period: str = "300s"  # SIGTERM -> checkpoint -> exit 0 must fit in it


@dataclass
class MountsConfig:
    """Host folders mounted at /data, /models and /outputs (relative = to the repo root)."""

    data: str = "data"
    models: str = "models"
    outputs: str = "outputs"


@dataclass
class InfraConfig:
    name: str = "local"
    device: str = "auto"  # auto | cpu | cuda
    gpu: GPUConfig = field(default_factory=GPUConfig)
    nproc_per_node: Any = "auto"  # "auto" (= selected GPUs, 1 on CPU) or a positive int
    nnodes: int = 1  # machines in the job (multi-node: torch's c10d rendezvous)
    node_rank: int = 0  # this machine's index, 0..nnodes-1
    rdzv_endpoint: str | None = None  # host:port of the rendezvous (node 0), multi-node only
    rdzv_id: str | None = None  # the job's rendezvous id, the same on every node
    parallel: str = "ddp"  # ddp (full replicas) | fsdp (shard the policy over the ranks)
    container: ContainerConfig = field(default_factory=ContainerConfig)
    mounts: MountsConfig = field(default_factory=MountsConfig)
    # extra variables for the job's environment (e.g. NCCL_P2P_DISABLE: "1"); forwarded into the
    # container by the Docker launcher
    environment: dict[str, str] = field(default_factory=dict)


@dataclass
class LoggerConfig:
    tensorboard: bool = True
    samples_every: int = 10  # steps between text panels of sample completions
    num_samples: int = 8  # completions shown per panel
    flush_secs: int = 10


@dataclass
class TrainerConfig:
    total_steps: int = 1200
    eval_every: int = 50
    eval_prompts: int = 200  # held-out prompts per evaluation (capped by the task's pool)
    max_grad_norm: float = 1.0
    progress_bar: bool = True
    max_duration: Any = None  # wall-clock budget ("90m", "2h", seconds); then checkpoint, exit 0


@dataclass
class CheckpointConfig:
    every_steps: int = 200  # periodic checkpoints (0 = only at the end / on stop)
    keep_last: int = 2  # complete checkpoints kept; older ones are pruned after a save
    resume: Any = "auto"  # "auto" (latest in the run dir), a checkpoint path, or null


@dataclass
class TrainConfig:
    """The root config (``conf/train.yaml``)."""

    train_type: Any = MISSING
    model: Any = MISSING
    critic: Any = MISSING
    task: Any = MISSING
    infra: Any = MISSING
    logger: Any = MISSING
    seed: int = 0
    optimized_metric: str = "eval/accuracy"
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ckpt: CheckpointConfig = field(default_factory=CheckpointConfig)
