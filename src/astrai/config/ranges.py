"""Ranges, finiteness and upper bounds of numeric keys: one line naming the key.

A value outside its range (``nan`` and ``inf`` included) is refused before the run starts, not
when PyTorch or the trainer first uses it. Upper bounds guard against values that would hang
the machine (a step of 1e8 prompts); ``trainer.allow_large=true`` lifts them for a deliberate
large job.
"""

from __future__ import annotations

import math
from typing import Any

from omegaconf import ListConfig

from astrai.config.errors import ConfigError

LARGE_KEY = "trainer.allow_large"
# sequences per RL step (prompts_per_step × group_size): a few minutes per step on a large GPU
MAX_ROLLOUT_SEQUENCES = 1_000_000
MAX_EVAL_PROMPTS = 100_000  # held-out prompts drawn at start-up (and per evaluation)
MAX_PARAMETERS = 20_000_000_000  # policy parameters (20B: beyond one 141 GB GPU's RL budget)
MAX_EPOCHS = 1_000  # train_type.ppo_epochs
MAX_RESAMPLE_ROUNDS = 1_000  # train_type.max_resample_rounds
MAX_SEED = 2**62  # the trainer offsets the seed per rank and round; torch takes < 2**64
MAX_COUNT = 2**53  # any other integer key (steps, intervals): exact in a float, fits int64


def is_real(value: object) -> bool:
    """A finite int or float (not a bool, which is an int to Python)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {low}"
    if high is not None:
        return f" {'<' if high_open else '<='} {high}"
    return ""


def _within(value: float, low: float | None, high: float | None, lo: bool, hi: bool) -> bool:
    if low is not None and (value <= low if lo else value < low):
        return False
    return not (high is not None and (value >= high if hi else value > high))


def check_number(
    value: Any,
    key: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    optional: bool = False,
) -> None:
    """``ConfigError`` unless ``value`` is a finite number (an int when ``integer``) within
    the bounds (``low_open``/``high_open``: the bound itself excluded); ``optional``: null is
    accepted too. Integers also stay at most ``MAX_COUNT`` unless ``high`` says otherwise.

    The message reads ``KEY must be [null or ]in [LOW, HIGH) (a finite number, got VALUE)``."""
    if value is None and optional:
        return
    if integer:
        ok = isinstance(value, int) and not isinstance(value, bool)
        ok = ok and _within(value, low, MAX_COUNT if high is None else high, low_open, high_open)
        big = high is None and ok is False and isinstance(value, int) and value > MAX_COUNT
        kind = "an integer up to 2**53" if big else "an integer"
    else:
        ok = is_real(value) and _within(value, low, high, low_open, high_open)
        kind = "a finite number"
    if not ok:
        null = "null or " if optional else ""
        bounds = _interval(low, high, low_open, high_open).strip()
        if not bounds:
            raise ConfigError(f"{key} must be {null}{kind} (got {value!r})")
        raise ConfigError(f"{key} must be {null}{bounds} ({kind}, got {value!r})")


def check_large(value: float, limit: float, what: str, allow_large: bool) -> None:
    """``ConfigError`` for ``value`` above ``limit`` unless ``trainer.allow_large``."""
    if value > limit and not allow_large:
        raise ConfigError(
            f"{what} ({value:,}) exceeds {limit:,}, which would tie up the machine for a "
            f"long time; set {LARGE_KEY}=true to run it anyway"
        )


def check_betas(betas: Any, key: str) -> None:
    """Adam's ``betas``: exactly two numbers, each in [0, 1)."""
    if not isinstance(betas, list | tuple | ListConfig) or len(betas) != 2:
        raise ConfigError(f"{key} must be a list of two numbers in [0, 1) (got {betas!r})")
    for i, beta in enumerate(betas):
        check_number(beta, f"{key}[{i}]", 0, 1, high_open=True)


def check_token_budget(value: Any, key: str) -> None:
    """A pass's token budget (``models.pass_memory.token_budget``): ``auto``, null or a positive
    integer."""
    if value == "auto" or value is None:
        return
    if not (isinstance(value, int) and not isinstance(value, bool)):
        raise ConfigError(f"{key} must be auto, null or a positive integer (got {value!r})")
    check_number(value, key, 1, integer=True)
