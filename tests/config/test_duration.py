"""Durations in the config (``trainer.max_duration``) parsed to seconds."""

from __future__ import annotations

import pytest

from astrai.config.duration import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90m", 5400.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("45s", 45.0),
        ("1d", 86400.0),
        ("0.5h", 1800.0),
        (30, 30.0),
        (2.5, 2.5),
    ],
)
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "90", "2 weeks", "m", "-5m", "0s", "1h-", True, 0])
def test_parse_duration_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)  # type: ignore[arg-type]
