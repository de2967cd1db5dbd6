"""astrai: online reinforcement learning (GRPO, PPO) for language models, composed with Hydra.

The command line is ``astrai-train`` (``python train.py`` in a checkout); from Python,
``astrai.compose(overrides)`` gives a job's checked config and ``astrai.fit(overrides or config)``
trains it and returns its summary (``astrai.api``, docs/api.md). Both are imported on first use:
``import astrai`` stays light (no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from astrai.api import compose, fit

__all__ = ["compose", "fit"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from astrai import api

        return getattr(api, name)
    raise AttributeError(f"module 'astrai' has no attribute {name!r}")
