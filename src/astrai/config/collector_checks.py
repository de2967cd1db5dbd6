"""Checks of the ``collector`` node (``astrai.rollout.collectors``): a collector class
(``_target_``; null: ``auto``, the one that fits ``env``) that plays episodes exactly when an
environment is set, and no key its constructor does not take. Each problem is one
``ConfigError`` naming the key (exit 2)."""

from __future__ import annotations

from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from astrai.config.errors import ConfigError
from astrai.rollout.collectors import Collector, collector_class, collector_knobs
from astrai.rollout.episodes.env_spec import EnvSpec


def configured_collector(node: Any, env: EnvSpec | None) -> type[Collector]:
    """The collector class the ``collector`` node chooses for the run's environment (``env``:
    ``config.env_checks.configured_env``), its keys checked; ``ConfigError`` naming the key
    otherwise."""
    plain = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    if plain is not None and not isinstance(plain, dict):
        raise ConfigError(f"collector must be a config node (collector=auto, ...), not {plain!r}")
    plain = cast(dict[str, Any] | None, plain)  # a composed YAML's keys are strings
    try:
        cls = collector_class(plain, env)
        collector_knobs(cls, plain)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return cls
