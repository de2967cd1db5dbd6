"""The weights an engine with its own copy takes: the policy's, with LoRA adapters merged in.

An engine such as vLLM holds a plain model (no adapters). After each update of a LoRA run it
takes the merged weights ``W + scale * B @ A`` (TRL's way: merge, push, unmerge), streamed one
tensor at a time: an adapted layer is merged in a copy of that one layer, so the extra memory is
one layer's, and the policy itself is never changed (a sampling thread may be reading it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

from torch import Tensor, nn

from astrai.models.lora import ADAPTER_NAME, _lora_layers
from astrai.models.weights import named_weights

BASE_LAYER = ".base_layer"  # PEFT keeps an adapted layer's frozen weight under <module>.base_layer


def engine_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """``(name, tensor)`` of every stored weight of the plain model under its plain name
    (``models.weights.named_weights``): as they lie without adapters; with them, each adapted
    layer's weight merged (PEFT's own ``merge``, DoRA's included) and the adapters' own tensors
    left out."""
    layers = _lora_layers(model)
    if not layers:
        yield from named_weights(model)
        return
    names = {id(m): n for n, m in model.named_modules()}
    adapted = {names[id(layer)]: layer for layer in layers}
    for name, tensor in named_weights(model):
        module, _, leaf = name.rpartition(".")
        if ".lora_" in name or ".lora_magnitude_vector" in name:
            continue  # an adapter's own tensor: merged into its layer's weight below
        if module.endswith(BASE_LAYER):
            owner = module[: -len(BASE_LAYER)]
            if leaf == "weight" and owner in adapted:
                yield f"{owner}.weight", _merged_weight(adapted[owner])
            else:
                yield f"{owner}.{leaf}", tensor  # an adapted layer's bias: unchanged
            continue
        yield name, tensor


def _merged_weight(layer: nn.Module) -> Tensor:
    """One adapted layer's merged weight, computed in a copy of the layer."""
    one = copy.deepcopy(layer)
    one.merge(adapter_names=[ADAPTER_NAME])  # type: ignore[operator]
    return one.get_base_layer().weight.detach()  # type: ignore[operator]
