"""The names a model's weights are stored under: every tensor once, tied ones by their first name.

Shared by the checkpoint files and the Hugging Face model directories (a tied ``lm_head.weight``
is not stored, as ``save_pretrained`` does).
"""

from __future__ import annotations

from torch import nn


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
