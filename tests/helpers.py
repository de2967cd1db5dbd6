"""Helpers shared by tests: compose the real Hydra config from ``conf/``."""

from __future__ import annotations

from astrai.config.compose import compose_train_config as compose_config

__all__ = ["compose_config"]
