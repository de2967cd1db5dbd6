"""``conf/train.yaml`` composed outside ``python train.py`` (tests, benchmarks, the CLIs)."""

from __future__ import annotations

from omegaconf import DictConfig


def compose_train_config(overrides: list[str] | None = None, validate: bool = True) -> DictConfig:
    """The config ``python train.py overrides...`` would run, validated like it unless
    ``validate`` is False; raises Hydra's errors for unknown groups or keys."""
    from hydra import compose, initialize_config_dir

    from astrai.config.store import register_configs
    from astrai.config.validate import validate_config
    from astrai.paths import CONFIG_DIR

    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides or [])
    if validate:
        validate_config(cfg)
    return cfg
