"""The names a model's weights are stored under: every tensor once, tied ones by their first name.

Shared by the checkpoint files and the Hugging Face model directories (a tied ``lm_head.weight``
is not stored, as ``save_pretrained`` does).
"""

from __future__ import annotations

from collections.abc import Iterator

from torch import Tensor, nn


def stored_names(module: nn.Module) -> list[str]:
    """State-dict names a checkpoint stores: tied tensors once (the first name wins)."""
    names: list[str] = []
    seen: set[int] = set()
    for name, tensor in module.state_dict().items():
        key = tensor.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names


def named_weights(module: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """``(name, tensor)`` for every stored tensor of ``module`` (``stored_names``: a tied
    ``lm_head`` is not a tensor of its own), detached, where it lies: no copy, no cast (what an
    engine with its own weights takes after an update,
    ``rollout.engines.engine.Engine.sync_weights``)."""
    state = module.state_dict()
    for name in stored_names(module):
        yield name, state[name].detach()
