"""The algorithms a ``train_type`` can name: adding one is its module plus one line here.

Everything the rest of astrai needs to know about an algorithm is on its ``Strategy`` class:
its name, whether it needs a critic, the metrics it emits, the files its checkpoints hold, and
its knobs (the keyword arguments of its constructor, from which ``config.store`` derives the
``train_type`` schema). ``conf/train_type/<name>.yaml`` holds the values.
"""

from __future__ import annotations

from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.ppo import PPOStrategy
from astrai.algorithms.strategy import Strategy

STRATEGIES: dict[str, type[Strategy]] = {}


def register_strategy(cls: type[Strategy]) -> type[Strategy]:
    """Make ``cls`` a ``train_type`` (by ``cls.name``); returns it, so it may decorate."""
    known = STRATEGIES.get(cls.name)
    if known is not None and known is not cls:
        raise ValueError(f"train_type {cls.name!r} is already registered ({known.__qualname__})")
    STRATEGIES[cls.name] = cls
    return cls


def strategy_class(name: str) -> type[Strategy]:
    """The registered strategy ``name``; a ``KeyError`` listing the known ones otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(
            f"unknown train_type {name!r} (registered: {', '.join(sorted(STRATEGIES))})"
        ) from None


register_strategy(GRPOStrategy)
register_strategy(PPOStrategy)
