"""The ``conf/model/<name>.yaml`` presets as plain ``LlamaConfig``s, for scripts that build a
model without composing a whole job (the benchmarks)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from omegaconf import OmegaConf

from astrai.models.llama import LlamaConfig
from astrai.paths import CONFIG_DIR


def load_model_preset(name: str) -> LlamaConfig:
    """``conf/model/<name>.yaml`` -> ``LlamaConfig``. Only the architecture keys are taken
    (``LlamaConfig``'s fields, Hugging Face names): a preset also holds run knobs such as
    ``gradient_checkpointing`` and Hydra's ``defaults``/``_target_``."""
    path = Path(CONFIG_DIR) / "model" / f"{name}.yaml"
    keys = OmegaConf.to_container(OmegaConf.load(path))
    if not isinstance(keys, dict):
        raise ValueError(f"{path}: not a mapping of model keys")
    architecture = {f.name for f in fields(LlamaConfig)}
    return LlamaConfig(**{k: v for k, v in keys.items() if k in architecture})
