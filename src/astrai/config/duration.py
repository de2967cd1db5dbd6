"""Durations as written in the config (``trainer.max_duration: 90m``), parsed to seconds."""

from __future__ import annotations

import math
import re

_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str | int | float) -> float:
    """``"90m"``, ``"2h"``, ``"1h30m"``, ``"45s"``, ``"1d"`` or a number of seconds -> seconds.

    Raises ValueError for anything else (empty, negative, unknown unit, zero, infinite, a
    list or any other type).
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"not a duration: {text!r} (use e.g. 90m, 2h, 1h30m, 45s)")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        compact = text.strip().lower().replace(" ", "")
        if not compact or _DURATION_PART.sub("", compact):
            raise ValueError(f"not a duration: {text!r} (use e.g. 90m, 2h, 1h30m, 45s)")
        seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(compact))
    if not 0 < seconds < math.inf:
        raise ValueError(f"duration must be finite and > 0 (got {text!r})")
    return seconds
