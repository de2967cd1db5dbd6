"""How the trained modules are spread over ranks: DDP replicas, or an FSDP-sharded policy.

``infra.parallel=ddp`` (default) keeps a full copy of policy and critic on every rank and
averages gradients; ``fsdp`` shards the policy's parameters, gradients and optimizer state over
the ranks (FSDP2 ``fully_shard``: each decoder layer, then the root) for policies that do not fit
one device. The critic and the frozen reference stay whole on every rank. Checkpoints hold full,
unsharded weights either way; the optimizer state is keyed by parameter name under FSDP and by
position under DDP, so a run resumes with the ``infra.parallel`` it was saved with.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    ValueType,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from astrai.models.llama import LlamaForCausalLM

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def wrap_data_parallel(module: nn.Module, device: torch.device) -> nn.Module:
    """DDP around ``module`` (gradients averaged over ranks in backward)."""
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(module, device_ids=ids)


def shard_policy(policy: LlamaForCausalLM, device: torch.device) -> None:
    """FSDP2 in place: one unit per decoder layer, the root (embeddings, final norm, head)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # An explicit mesh on the run's device type: fully_shard's default mesh is a CUDA one
    # whenever CUDA is present, so `infra.device=cpu` FSDP on a GPU machine would otherwise
    # bind rank r to GPU r (and fail with one GPU).
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    for layer in policy.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(policy, mesh=mesh)


def full_model_state(module: nn.Module, sharded: bool) -> dict[str, torch.Tensor]:
    """Unsharded CPU tensors by name. Sharded: a collective every rank joins; rank 0 gets
    the tensors, the others an empty dict."""
    if not sharded:
        return {k: v.detach().cpu() for k, v in module.state_dict().items()}
    # torch types the result for every option; a full state dict holds plain tensors only
    # (each DTensor gathered whole)
    return cast(dict[str, torch.Tensor], get_model_state_dict(module, options=FULL))


def full_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> Any:
    """The optimizer's state dict; sharded: full tensors keyed by parameter name (collective)."""
    if not sharded:
        return optimizer.state_dict()
    return get_optimizer_state_dict(module, optimizer, options=FULL)


def load_model_state(module: nn.Module, state: dict[str, torch.Tensor], sharded: bool) -> None:
    """Load full tensors (tied parameters may be stored once) into a whole or sharded module."""
    if not sharded:
        module.load_state_dict(state, strict=False)
        return
    # torch types the dict by what it may write into it (each rank's shard in place of a full
    # tensor, a DTensor): `state` is handed over, no caller reads it after this call
    set_model_state_dict(
        module,
        cast(dict[str, ValueType], state),
        options=StateDictOptions(full_state_dict=True, strict=False),
    )


def load_optimizer_state(
    module: nn.Module, optimizer: torch.optim.Optimizer, state: Any, sharded: bool
) -> None:
    if not sharded:
        optimizer.load_state_dict(state)
        return
    set_optimizer_state_dict(
        module, optimizer, state, options=StateDictOptions(full_state_dict=True)
    )


def replicas(
    policy: nn.Module, critic: nn.Module | None, device: torch.device, ranks: int, sharded: bool
) -> tuple[nn.Module, nn.Module | None]:
    """What the update's forward runs: over ``ranks`` > 1 DDP replicas, whose gradients are
    averaged over the ranks (the critic's too, so critics never drift); a ``sharded`` policy
    averages its own; in one process the modules themselves."""
    train_policy, train_critic = policy, critic
    if ranks > 1 and not sharded:
        train_policy = wrap_data_parallel(policy, device)
    if critic is not None and ranks > 1:
        train_critic = wrap_data_parallel(critic, device)
    return train_policy, train_critic
