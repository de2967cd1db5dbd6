"""What a reward term must return, checked where it runs (the trainer's thread or a reward
worker): one finite float32 per response. Below both ``astrai.rewards.base`` and the worker, so
neither imports the other's callers."""

from __future__ import annotations

import math
from typing import Any

from astrai.rewards.user_code import USER_ERRORS

FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max, without importing torch


class RewardError(RuntimeError):
    """A reward raised, or returned the wrong count or a non-finite value; names the prompt."""


def check_scores(
    name: str, prompts: list[str], responses: list[str], values: list[Any]
) -> list[float]:
    """Term ``name``'s ``values`` as floats, one per response, each a finite float32;
    ``RewardError`` naming the term and the prompt otherwise."""
    if len(values) != len(responses):
        raise RewardError(
            f"reward {name} returned {len(values)} scores for {len(responses)} "
            f"responses (first prompt {prompts[0] if prompts else ''!r})"
        )
    scores = []
    for prompt, value in zip(prompts, values, strict=True):
        try:
            score = float(value)
        except USER_ERRORS:  # OverflowError: an int past float; or a user __float__
            score = math.nan
        if not finite32(score):
            raise RewardError(
                f"reward {name} returned {value!r} (not a finite float32) on prompt {prompt!r}"
            )
        scores.append(score)
    return scores


def finite32(value: float) -> bool:
    """Whether ``value`` is finite and fits a float32 (what the trainer stores rewards in)."""
    return math.isfinite(value) and abs(value) <= FLOAT32_MAX
