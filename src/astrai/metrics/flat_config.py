"""A run's resolved config as flat ``dotted.key -> text`` pairs: MLflow's params (strings,
bounded in length, sent in batches of bounded size)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

# what every MLflow server accepts: 500 characters a value before MLflow 2.3 raised it (3.18's
# own bound is 6000), 100 params a log_batch call
PARAM_VALUE_MAX = 500
PARAMS_PER_BATCH = 100
TRUNCATED = "..."


def param_text(value: object) -> str:
    """One leaf as text, spelled as in the YAML: ``true``/``false``, ``null``, numbers as
    Python prints them, lists and empty mappings as compact JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def flatten_config(
    config: Mapping[str, object], max_len: int = PARAM_VALUE_MAX, prefix: str = ""
) -> dict[str, str]:
    """``{"a": {"b": 1, "c": [1, 2]}}`` -> ``{"a.b": "1", "a.c": "[1,2]"}``: mappings become
    dotted keys, every other value one leaf (``param_text``); a value longer than ``max_len``
    is cut to ``max_len`` characters ending in ``...``."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, max_len, f"{name}."))
            continue
        text = param_text(value)
        if len(text) > max_len:
            text = text[: max_len - len(TRUNCATED)] + TRUNCATED
        flat[name] = text
    return flat


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
