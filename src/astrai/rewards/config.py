"""The ``reward`` config node as the plain mapping ``build_reward`` reads."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf


def reward_node(reward: DictConfig) -> dict[str, Any]:
    container = OmegaConf.to_container(reward, resolve=True)
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}
