"""The ``model.lora`` node: what builds the adapters (``models.lora.LoraSettings``), and the
checks that run before anything starts.

``model.lora.rank: null`` is full fine-tuning; a rank turns adapters on. The model builders
(``build_llama``, ``load_pretrained_policy``) never see the node: ``builder_node`` leaves it out.
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from astrai.config.errors import ConfigError, require
from astrai.config.ranges import MAX_PARAMETERS, check_large
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.lora import (
    LoraConfigError,
    LoraSettings,
    adapter_parameter_count,
    target_widths,
)

LORA_KEY = "lora"


def lora_node(model: DictConfig) -> DictConfig | None:
    """``model.lora`` when it turns adapters on (a rank is set), else None."""
    node = model.get(LORA_KEY)
    if node is None or node.get("rank") is None:
        return None
    return node


def lora_settings(model: DictConfig) -> LoraSettings | None:
    """The adapters ``model.lora`` asks for (None: full fine-tuning); a bad value is a
    one-line ``ConfigError`` naming its key."""
    node = lora_node(model)
    if node is None:
        return None
    fields: dict[str, Any] = OmegaConf.to_container(node, resolve=True)  # type: ignore[assignment]
    try:
        return LoraSettings(**fields)
    except LoraConfigError as err:
        raise ConfigError(f"model.{err}") from err


def builder_node(model: DictConfig) -> DictConfig:
    """``model`` without its ``lora`` block: the keyword arguments of its ``_target_``."""
    container: dict[str, Any] = OmegaConf.to_container(model, resolve=True)  # type: ignore[assignment]
    container.pop(LORA_KEY, None)
    return OmegaConf.create(container)


def _check_size(
    cfg: DictConfig,
    skeleton: LlamaForCausalLM,
    settings: LoraSettings,
    widths: list[tuple[int, int]],
) -> None:
    """The rank at most the widest targeted layer's ``min(in, out)`` (beyond it no targeted
    update gains rank: ``B A`` is already full rank), and the base's parameters plus the
    adapters' within ``MAX_PARAMETERS`` (``trainer.allow_large`` lifts that bound only)."""
    most = max(min(fan_in, fan_out) for fan_in, fan_out in widths)
    require(
        settings.rank <= most,
        f"model.lora.rank must be in [1, {most}] (the widest targeted layer's min(in, out): "
        f"a larger rank adds parameters, not rank; got {settings.rank})",
    )
    adapters = adapter_parameter_count(widths, settings.rank, settings.use_dora)
    base = sum(p.numel() for p in skeleton.parameters())
    check_large(
        base + adapters,
        MAX_PARAMETERS,
        f"model parameters with model.lora's adapters ({adapters:,} of them)",
        bool(cfg.trainer.allow_large),
    )


def validate_lora(cfg: DictConfig, model: LlamaConfig) -> None:
    """``model.lora``: its values, every target module against the model's decoder linears
    (on a meta-device model: no memory), what adapters cannot run with yet (the reference is
    the base itself, so there is nothing to offload), and
    ``peft`` installed (last: a bad value is named even where peft is missing)."""
    settings = lora_settings(cfg.model)
    if settings is None:
        return
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(model)
    try:
        widths = target_widths(skeleton, settings.target_modules)
    except LoraConfigError as err:
        raise ConfigError(f"model.{err}") from err
    _check_size(cfg, skeleton, settings, widths)
    require(
        not cfg.infra.offload_reference,
        "infra.offload_reference=true with model.lora: the reference is the base model with the "
        "adapters off (no copy to offload); drop infra.offload_reference",
    )
    require(
        cfg.critic.name == "none" or bool(cfg.critic.get("warm_start", True)),
        "critic.warm_start=false with model.lora: the critic's trunk is the policy's frozen base "
        "(it trains adapters and its value head only), so it cannot start from random weights",
    )
    try:
        import peft  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            "model.lora needs peft, which is not installed: pip install 'astrai[lora]' "
            "(or make install-dev)"
        ) from err
