"""The ``reward`` config node as the plain mapping ``build_reward`` reads, and the DAPO
overlong penalty its ``overlong_buffer`` / ``overlong_penalty`` keys configure."""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from astrai.rewards.base import RewardConfigError, default_name
from astrai.rewards.overlong import OVERLONG_TERM, OverlongPenalty


def reward_node(reward: DictConfig) -> dict[str, Any]:
    container = OmegaConf.to_container(reward, resolve=True)
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}


def overlong_from_config(cfg: DictConfig) -> OverlongPenalty | None:
    """The run's soft overlong penalty from the composed root config, or None when
    ``reward.overlong_buffer`` is null (or absent).

    ``L_max`` is ``train_type.sampling.max_new_tokens``; the buffer must be an int in
    ``[1, L_max]`` and ``reward.overlong_penalty`` (default 1.0) a finite number >= 0. Applied
    to training rollouts only (``collect_rollout(..., overlong=...)``), logged as
    ``reward/overlong``. ``RewardConfigError`` naming the key otherwise.
    """
    node = reward_node(cfg.reward)
    buffer = node.get("overlong_buffer")
    factor = node.get("overlong_penalty", 1.0)
    max_len = cfg.train_type.sampling.max_new_tokens
    if buffer is None:
        return None
    if isinstance(buffer, bool) or not isinstance(buffer, int) or not 1 <= buffer <= max_len:
        raise RewardConfigError(
            f"reward.overlong_buffer must be null or an int in [1, "
            f"train_type.sampling.max_new_tokens = {max_len}] (got {buffer!r})"
        )
    if (
        isinstance(factor, bool)
        or not isinstance(factor, int | float)
        or not math.isfinite(factor)
        or factor < 0
    ):
        raise RewardConfigError(
            f"reward.overlong_penalty must be a finite number >= 0 (got {factor!r})"
        )
    if OVERLONG_TERM in _term_names(node):
        raise RewardConfigError(
            f"reward: a term named {OVERLONG_TERM!r} clashes with the overlong penalty's "
            f"reward/{OVERLONG_TERM} (rename the term or set reward.overlong_buffer=null)"
        )
    return OverlongPenalty(max_len=max_len, buffer=buffer, factor=float(factor))


def _term_names(node: dict[str, Any]) -> list[str]:
    """The term names ``build_reward`` gives ``node`` (best effort: a malformed node is
    ``build_reward``'s to refuse)."""
    terms = node.get("terms")
    nodes = terms if isinstance(terms, list) else [node]
    names = []
    for term in nodes:
        if isinstance(term, dict):
            target = term.get("_target_")
            name = term.get("name") or (default_name(target) if isinstance(target, str) else "")
            names.append(name)
    return names
