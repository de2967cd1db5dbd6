"""The one exception of bad configuration (kept apart so every config module can raise it)."""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid configuration; the message names the offending key. Always one line (the CLI
    prints ``astrai: config error: <message>``): a message of several lines, e.g. a library's
    wrapped in it, has its lines joined with ``; ``."""

    def __init__(self, message: object = "") -> None:
        lines = [line.strip() for line in str(message).splitlines() if line.strip()]
        super().__init__("; ".join(lines))


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (libraries' messages span lines), or its type's name
    when it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def require(condition: bool, message: str) -> None:
    """``ConfigError(message)`` unless ``condition``."""
    if not condition:
        raise ConfigError(message)
