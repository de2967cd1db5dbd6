"""A LoRA run's models (``model.lora``): the policy with PEFT adapters, the reference as the
same model with its adapters off, and the PPO critic as its own adapters and value head on the
policy's frozen trunk.

Decisions (docs/lora.md):
- The reference is ``BaseModelView(policy)``: the base weights the adapters sit on, never a
  second copy (TRL's ``ref_model=None`` with PEFT, verl's ``ref_in_actor``).
- The critic shares the policy's frozen base weights (the same tensors, no copy) and trains
  adapters of its own (the same ``model.lora`` settings) plus its value head. Under FSDP the
  policy is sharded in place after this, so there the critic keeps a whole copy of the trunk
  (as a full run's critic is whole on every rank).
- The base model's identity is a SHA-256 over its weights as loaded (names, dtypes, shapes,
  bytes), recorded with the base's path in every checkpoint and compared on resume.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from astrai.models.kv_cache import KVCache
from astrai.models.llama import LlamaForCausalLM, set_gradient_checkpointing
from astrai.models.lora import LoraSettings, adapters_disabled, apply_lora, base_fingerprint
from astrai.models.value_model import ValueModel, build_value_model


class BaseModelView(nn.Module):
    """The policy with its adapters off: ``forward`` and ``new_cache`` as the policy's, computed
    by the base weights alone. Holds the policy as a submodule (so FSDP's sharding is seen), but
    is never trained, saved or moved: it is a view, not a copy."""

    def __init__(self, policy: LlamaForCausalLM) -> None:
        super().__init__()
        self.policy = policy

    @property
    def config(self) -> Any:
        return self.policy.config

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with adapters_disabled(self.policy):
            return self.policy(*args, **kwargs)

    def new_cache(
        self, batch_size: int, max_length: int, dtype: torch.dtype | None = None
    ) -> KVCache:
        return self.policy.new_cache(batch_size, max_length, dtype)


@dataclass(frozen=True)
class BaseIdentity:
    """What a LoRA run's adapters sit on. ``path``: ``model.path``, absolute (None for a model
    built from its config and the seed); ``sha256``: ``base_fingerprint``."""

    path: str | None
    sha256: str

    def record(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256}


def base_identity(model_node: Any, base: nn.Module) -> BaseIdentity:
    """The identity of ``base`` (before its adapters), built from the ``model`` node."""
    path = model_node.get("path")
    resolved = None if path is None else str(Path(path).resolve())
    return BaseIdentity(resolved, base_fingerprint(base))


def trainable_parameters(module: nn.Module) -> list[nn.Parameter]:
    """What an optimizer trains: every parameter of a full run, the adapters (and a critic's
    value head) of a LoRA run."""
    return [p for p in module.parameters() if p.requires_grad]


def _share_trunk(critic: ValueModel, policy: LlamaForCausalLM) -> None:
    """Make the critic's trunk parameters and buffers the policy's own tensors (same names, no
    copy); the RoPE module, which holds tensors of neither kind, is the policy's itself."""
    for name, module in critic.model.named_modules():
        source = policy.model.get_submodule(name) if name else policy.model
        for key in list(module._parameters):
            module._parameters[key] = source._parameters[key]
        for key in list(module._buffers):
            module._buffers[key] = source._buffers[key]
    critic.model.rotary_emb = policy.model.rotary_emb


def build_lora_critic(policy: LlamaForCausalLM, share_trunk: bool) -> ValueModel:
    """A PPO critic for a LoRA run, built before the policy's adapters: the policy's trunk
    (shared tensors when ``share_trunk``, else a copy) with a zero-initialised value head.
    ``attach_adapters`` then gives it adapters of its own."""
    if not share_trunk:
        # the copy's random init is overwritten (trunk) or zeroed (head): drawn on a side
        # stream, so the adapters drawn next are the shared-trunk build's (1 process = FSDP's)
        with torch.random.fork_rng(devices=[]):
            return build_value_model(policy, warm_start=True)
    like = policy.lm_head.weight
    with torch.device("meta"):  # the trunk is replaced by the policy's: allocate nothing
        critic = ValueModel(policy.config)
    _share_trunk(critic, policy)
    with torch.random.fork_rng(devices=[]):  # zeroed below: no draw from the global stream
        critic.value_head = nn.Linear(
            policy.config.hidden_size, 1, device=like.device, dtype=like.dtype
        )
    nn.init.zeros_(critic.value_head.weight)
    nn.init.zeros_(critic.value_head.bias)
    set_gradient_checkpointing(critic, policy.model.gradient_checkpointing)
    left = [n for n, t in [*critic.named_parameters(), *critic.named_buffers()] if t.is_meta]
    if left:  # a trunk tensor _share_trunk does not know of: a bug, said before any step
        raise RuntimeError(f"build_lora_critic: not shared from the policy: {left[:3]}")
    return critic


def attach_adapters(model: nn.Module, settings: LoraSettings) -> None:
    """PEFT's LoRA layers into ``model`` (the policy, or a critic: its value head stays
    trainable); every base weight is frozen."""
    apply_lora(model, settings)  # type: ignore[arg-type]  # a ValueModel has the same trunk
    if isinstance(model, ValueModel):
        model.value_head.requires_grad_(True)


def trainable_counts(policy: nn.Module, critic: nn.Module | None) -> tuple[int, int | None]:
    """Trainable parameters of the policy and the critic (None without one), for the banner."""
    policy_count = sum(p.numel() for p in trainable_parameters(policy))
    return policy_count, None if critic is None else sum(
        p.numel() for p in trainable_parameters(critic)
    )


class TrainableState:
    """A module's checkpoint as its trainable tensors only (a LoRA critic: adapters and value
    head; its frozen trunk is the base model's): ``state_dict`` / ``load_state_dict`` as torch's,
    strict on those names."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def names(self) -> list[str]:
        return [name for name, p in self.module.named_parameters() if p.requires_grad]

    def state_dict(self) -> dict[str, Tensor]:
        params = dict(self.module.named_parameters())
        return {name: params[name].detach() for name in self.names()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        expected = set(self.names())
        missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
        if missing or unexpected:
            raise ValueError(f"missing {missing[:3]}, unexpected {unexpected[:3]}")
        params = dict(self.module.named_parameters())
        with torch.no_grad():
            for name in expected:
                params[name].copy_(state[name])


def build_reference_and_critic(
    policy: LlamaForCausalLM,
    lora: LoraSettings | None,
    critic_node: Any,
    offload_reference: bool,
    sharded: bool,
) -> tuple[nn.Module, ValueModel | None]:
    """The run's KL reference and PPO critic (None for ``critic=none``), built before any
    sharding. Full fine-tuning: a frozen copy of the initial policy (on the CPU with
    ``offload_reference``) and a critic warm-started from it. LoRA: adapters into the policy, the
    reference the policy with them off, the critic its own adapters on the policy's trunk."""
    critic = None
    if critic_node.name != "none":
        critic = (
            build_value_model(policy, critic_node.warm_start)
            if lora is None
            else build_lora_critic(policy, share_trunk=not sharded)
        )
    if lora is None:
        reference: nn.Module = copy.deepcopy(policy).eval().requires_grad_(False)
        if offload_reference:  # it waits on the CPU between its scoring passes
            reference.to("cpu")
        return reference, critic
    attach_adapters(policy, lora)
    if critic is not None:
        attach_adapters(critic, lora)
    return BaseModelView(policy), critic
