"""The models a strategy scores with, built by role: what its class declares
(``Strategy.requires``) is what ``build_run`` builds, and ``prepare`` receives them by name.

- ``reference``: the frozen initial policy (a LoRA run: the base with its adapters off,
  ``training.adapters.build_reference_and_critic``). Built for every run, required or not: the
  checkpoints save it (the KL anchor a resume reads back) and name the policy's tied weights by
  it.
- ``critic``: PPO's ``ValueModel`` (``critic=value_model``) and its optimizer; config validation
  refuses a critic the strategy does not require (``config.role_checks``), so the two agree.
- ``teacher``: a frozen model in eval mode (no gradients) loaded from ``teacher.path`` (a
  Hugging Face model directory, an astrai checkpoint or a run dir: the loaders ``model=hf`` and
  ``astrai.generate`` use, ``checkpoints.policy.load_policy``), on the training device; its
  tokenizer must be the policy's (``config.role_checks.check_same_vocabulary``). Built only for
  a strategy that requires it.

Adding a role is an entry in ``config.role_checks.ROLES`` (how the config gives it) and its
builder here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch import nn

from astrai.algorithms.strategy import Strategy
from astrai.checkpoints.policy import load_policy
from astrai.config.errors import ConfigError
from astrai.config.role_checks import ROLES, check_same_vocabulary, teacher_path
from astrai.models.llama import LlamaForCausalLM
from astrai.models.lora import LoraSettings
from astrai.models.tokenizer import Tokenizer
from astrai.models.value_model import ValueModel
from astrai.training.adapters import build_reference_and_critic, trainable_parameters


@dataclass(frozen=True)
class Roles:
    """The models built for a run. ``models``: those of ``Strategy.requires``, by role (what
    ``prepare`` receives); ``reference`` and ``critic`` also by name (the checkpoints', the
    update's and the banner's readers)."""

    reference: nn.Module
    critic: ValueModel | None
    critic_optimizer: torch.optim.Optimizer | None
    models: Mapping[str, nn.Module]


def build_roles(
    strategy: Strategy,
    cfg: DictConfig,
    policy: LlamaForCausalLM,
    tokenizer: Tokenizer,
    lora: LoraSettings | None,
    sharded: bool,
    device: torch.device,
) -> Roles:
    """The reference and critic (before any sharding, in the order a run always built them:
    the critic's draws from the random stream first), then the teacher where required."""
    reference, critic = build_reference_and_critic(
        policy, lora, cfg.critic, cfg.infra.offload_reference, sharded
    )
    critic_optimizer = (
        None if critic is None else instantiate(cfg.critic.optimizer)(trainable_parameters(critic))
    )
    built: dict[str, nn.Module | None] = {"reference": reference, "critic": critic}
    path = teacher_path(cfg)
    if "teacher" in strategy.requires and path is not None:
        built["teacher"] = build_teacher(path, policy, tokenizer, device)
    models: dict[str, nn.Module] = {}
    for role in strategy.requires:
        model = built.get(role)
        if model is None:  # validation says it first (config.role_checks): a run built unchecked
            source = ROLES.get(role)
            fix = "astrai builds no such model" if source is None else source.use
            raise ConfigError(f"train_type={strategy.name} needs a {role}: {fix}")
        models[role] = model
    return Roles(reference, critic, critic_optimizer, MappingProxyType(models))


def build_teacher(
    path: str, policy: LlamaForCausalLM, tokenizer: Tokenizer, device: torch.device
) -> nn.Module:
    """The frozen teacher at ``path`` (``teacher.path``), in eval mode on ``device``; a
    ``ConfigError`` of one line when it cannot be loaded or its vocabulary is not the
    policy's."""
    # its random init (overwritten by the weights) must not move the run's global stream
    with torch.random.fork_rng(devices=[]):
        try:
            loaded = load_policy(path)
        except (OSError, ValueError) as err:
            raise ConfigError(f"teacher.path: {' '.join(str(err).split())}") from None
    check_same_vocabulary(loaded.tokenizer, loaded.policy.config, tokenizer, policy.config)
    return loaded.policy.to(device).eval().requires_grad_(False)
