"""What a run is built from its config: one frozen record (``BuiltRun``) made by one builder.

The builder reads nothing from the run dir: resuming, the schedules (which a checkpoint may
span differently), the ``TrainState``, the engine and the rollout source are the loop's
(``training.loop.start_run``), after this. The order matters and is the one a run always had:
the seed first, every model initialised before the reward (whose construction must not move
the global random stream), the reference and critic before any sharding, the optimizer after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from astrai.algorithms.strategy import Strategy
from astrai.config.env_checks import configured_env
from astrai.config.errors import ConfigError
from astrai.config.lag_checks import check_lag_world
from astrai.config.lora_checks import builder_node, lora_settings
from astrai.config.run_task import build_task, max_prompt_tokens
from astrai.config.train_type_checks import build_strategy, check_world_batch
from astrai.distributed import DistContext, apply_slurm_environment, env_context, init_distributed
from astrai.metrics.dashboards import hydra_job_context
from astrai.models.llama import LlamaForCausalLM
from astrai.models.lora import LoraSettings
from astrai.models.pretrained import tokenizer_for
from astrai.models.tokenizer import Tokenizer
from astrai.models.value_model import ValueModel
from astrai.rewards.base import Reward
from astrai.rewards.build import build_reward
from astrai.rewards.config import overlong_from_config, reward_node
from astrai.rewards.overlong import OverlongPenalty
from astrai.rollout.collectors import Collector, CollectorParts, build_collector
from astrai.tasks.base import Problem, ProblemSource
from astrai.training.adapters import (
    BaseIdentity,
    base_identity,
    trainable_counts,
    trainable_parameters,
)
from astrai.training.checkpointing import CheckpointedObjects, Stateful, critic_objects
from astrai.training.distillation import Distiller, build_distiller
from astrai.training.parallel import shard_policy
from astrai.training.roles import build_roles
from astrai.training.setup import resolve_device, seed_everything
from astrai.training.weight_format import WeightFormat, weight_format

JobContext = tuple[list[str], dict[str, object]]


def count_parameters(module: torch.nn.Module) -> int:
    """Parameters of ``module``; a tied weight (embedding = LM head) counts once."""
    return sum(parameter.numel() for parameter in module.parameters())


@dataclass(frozen=True)
class BuiltRun:
    """Everything a run trains with, as built from its config (before any resume).

    Attributes:
        job_overrides, job_choices: the Hydra job's command-line overrides and group choices.
        lora: the adapters' settings (None: full fine-tuning); ``base``: what they sit on.
        reference: the frozen initial policy (LoRA: the base with its adapters off).
        critic, critic_optimizer: PPO's value model and its optimizer (None otherwise).
        models: the models ``strategy.requires``, by role (``training.roles``): the reference,
            the critic, a teacher.
        sharded: the policy is sharded over the ranks (``infra.parallel=fsdp``).
        parameter_counts: ``(policy, critic)`` parameters, counted before any sharding.
        adapter_counts: a LoRA run's trainable ``(policy, critic)`` counts.
        overlong: the overlong-response penalty (training rollouts only).
        eval_problems: the held-out prompts every evaluation answers.
        collector: how its rollouts and held-out answers are collected (``collector``, by
            default the one that fits ``env``: ``rollout.collectors``).
        distiller: ``distill=opd``'s teachers (``training.distillation``); None: off.
    """

    cfg: DictConfig
    run_dir: Path
    job_overrides: list[str]
    job_choices: dict[str, object]
    dist: DistContext
    device: torch.device
    tokenizer: Tokenizer
    task: ProblemSource
    lora: LoraSettings | None
    base: BaseIdentity | None
    policy: LlamaForCausalLM
    reference: torch.nn.Module
    critic: ValueModel | None
    critic_optimizer: torch.optim.Optimizer | None
    models: Mapping[str, torch.nn.Module]  # what ``strategy.prepare`` receives, by role
    strategy: Strategy
    optimizer: torch.optim.Optimizer
    sharded: bool
    parameter_counts: tuple[int, int | None]
    adapter_counts: tuple[int, int | None] | None
    reward: Reward
    overlong: OverlongPenalty | None
    eval_problems: list[Problem]
    weights: WeightFormat  # what its checkpoints hold of the policy: full, or adapters
    collector: Collector  # one answer per prompt, or env=...'s multi-turn episodes
    distiller: Distiller | None = None  # distill=opd's teachers

    def checkpointed_objects(
        self, scheduler: Stateful, critic_scheduler: Stateful | None
    ) -> CheckpointedObjects:
        """What a checkpoint saves besides the ``TrainState``: the trained objects (loaded in
        place on restore; ``scheduler``s: the started run's) and the facts its fingerprint
        records."""
        strategy = self.strategy
        critic = None if self.critic is None else self.weights.critic_state(self.critic)
        return CheckpointedObjects(
            cfg=self.cfg,
            run_dir=self.run_dir,
            strategy_name=strategy.name,
            checkpoint_files=strategy.checkpoint_files,
            samples_per_step=strategy.prompts_per_step * strategy.group_size,
            policy=self.policy,
            reference=self.reference,
            optimizer=self.optimizer,
            scheduler=scheduler,
            tokenizer=self.tokenizer,
            extra=critic_objects(critic, self.critic_optimizer, critic_scheduler),
            dist=self.dist,
            device=self.device,
            sharded=self.sharded,
            weights=self.weights,
            identities={} if self.distiller is None else self.distiller.fingerprint(),
        )


def build_run(
    cfg: DictConfig, run_dir: str | Path, job_context: JobContext | None = None
) -> BuiltRun:
    """Build ``cfg``'s run (``job_context``: the Hydra job's overrides and choices; default the
    current job's, empty outside Hydra; an elastic worker gets its launcher's)."""
    job_overrides, job_choices = job_context or hydra_job_context()
    seed_everything(cfg.seed)
    apply_slurm_environment(cfg.infra.name)  # train.py did; a run built directly
    dist = env_context()
    device = resolve_device(cfg.infra, dist)
    init_distributed(device)
    check_world_batch(cfg.train_type, dist.world_size)
    check_lag_world(cfg.train_type, dist.world_size, cfg.infra.parallel)
    tokenizer = tokenizer_for(cfg.model)
    # task.filter_overlong_prompts drops the rows too long for this model and response limit
    task = build_task(cfg.task, tokenizer, max_prompt_tokens(cfg))
    lora = lora_settings(cfg.model)
    policy: LlamaForCausalLM = instantiate(builder_node(cfg.model))
    base = base_identity(cfg.model, policy) if lora is not None else None  # compared on resume
    policy.to(device)
    sharded = cfg.infra.parallel == "fsdp" and dist.world_size > 1
    strategy = build_strategy(cfg.train_type)  # the run's keys (batch shape, lag) left out
    # the models it requires, by role (LoRA: the reference is the base with its adapters off,
    # the critic its own adapters on the policy's trunk); before any sharding
    roles = build_roles(strategy, cfg, policy, tokenizer, lora, sharded, device)
    critic = roles.critic
    # distill=opd: its frozen teachers (loaded on a side stream) and the strategy's settings
    distiller = build_distiller(cfg, task, policy, tokenizer, device)
    strategy.distill = None if distiller is None else distiller.settings
    counts = (count_parameters(policy), None if critic is None else count_parameters(critic))
    # after every model init: a reward model's construction must not move the global RNG
    with torch.random.fork_rng(devices=[]):
        reward = build_reward(reward_node(cfg.reward)).to(device)
    if sharded:  # in place; the optimizer must then see the sharded parameters
        shard_policy(policy, device)
    overlong = overlong_from_config(cfg)  # training rollouts only, never evaluation
    return BuiltRun(
        cfg=cfg,
        run_dir=Path(run_dir),
        job_overrides=job_overrides,
        job_choices=job_choices,
        dist=dist,
        device=device,
        tokenizer=tokenizer,
        task=task,
        lora=lora,
        base=base,
        policy=policy,
        reference=roles.reference,
        critic=critic,
        critic_optimizer=roles.critic_optimizer,
        models=roles.models,
        strategy=strategy,
        optimizer=strategy.optimizer(trainable_parameters(policy)),
        sharded=sharded,
        parameter_counts=counts,
        adapter_counts=None if lora is None else trainable_counts(policy, critic),
        reward=reward,
        overlong=overlong,
        eval_problems=task.eval_problems(cfg.trainer.eval_prompts),
        weights=weight_format(lora, base),
        collector=build_run_collector(cfg, tokenizer, strategy, reward, overlong, policy),
        distiller=distiller,
    )


def build_run_collector(
    cfg: DictConfig,
    tokenizer: Tokenizer,
    strategy: Strategy,
    reward: Reward,
    overlong: OverlongPenalty | None,
    policy: LlamaForCausalLM,
) -> Collector:
    """The run's collector (``collector`` and ``env``, validated at start)."""
    parts = CollectorParts(
        tokenizer=tokenizer,
        reward=reward,
        max_positions=policy.config.max_position_embeddings,
        group_size=strategy.group_size,
        sampling=strategy.sampling,
        mask_truncated=strategy.mask_truncated,
        overlong=overlong,
        env=configured_env(cfg.get("env")),
    )
    try:
        return build_collector(cfg.get("collector"), parts)
    except ValueError as err:
        raise ConfigError(str(err)) from None
