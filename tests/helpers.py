"""Helpers shared by tests: compose the real Hydra config from ``conf/``."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from astrai.config.store import register_configs
from astrai.config.validate import validate_config
from astrai.paths import CONFIG_DIR


def compose_config(overrides: list[str] | None = None, validate: bool = True) -> DictConfig:
    """``conf/train.yaml`` with ``overrides``, as ``python train.py`` would compose it."""
    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides or [])
    if validate:
        validate_config(cfg)
    return cfg
