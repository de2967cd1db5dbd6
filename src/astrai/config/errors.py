"""The one exception of bad configuration (kept apart so every config module can raise it)."""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid configuration; the message names the offending key."""


def require(condition: bool, message: str) -> None:
    """``ConfigError(message)`` unless ``condition``."""
    if not condition:
        raise ConfigError(message)
