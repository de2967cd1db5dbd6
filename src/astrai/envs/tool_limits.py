"""A tool or an environment step run within limits, so a hung, crashing or flooding one costs
its episode, never the run (issue 50, part 5; verl PR #6673: a degenerate sample froze the
driver for hours).

``run_limited`` runs a callable in a daemon worker thread and waits at most ``timeout_s``.
Python cannot kill a thread: a call that never returns is abandoned (its thread left to the
interpreter's exit, which does not wait for daemon threads) and reported as a timeout. Its
exception becomes an error; a result longer than ``max_chars`` is cut and flagged. The caller
turns an error or timeout into a tool error message the policy sees, or masks the episode,
and counts it (``env/tool_errors``, ``env/timeouts``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limited:
    """What a limited call gave: ``value`` (its result; its text cut to ``max_chars`` when it
    was a string), or ``error`` (one line: the exception, or the timeout); ``timed_out`` and
    ``cut`` say which limit acted."""

    value: Any = None
    error: str | None = None
    timed_out: bool = False
    cut: bool = False


def run_limited(
    fn: Callable[..., Any], *args: Any, timeout_s: float, max_chars: int | None = None
) -> Limited:
    """``fn(*args)`` in a daemon thread, within ``timeout_s`` seconds and ``max_chars``
    characters of result text (``str(result)`` when it is not a string)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as err:  # noqa: BLE001 (whatever a user's tool raises)
            box["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"

    worker = threading.Thread(target=work, name="astrai-env-call", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return Limited(error=f"timed out after {timeout_s:g} s", timed_out=True)
    if "error" in box:
        return Limited(error=box["error"].rstrip(": "))
    value = box.get("value")
    if max_chars is not None:
        text = value if isinstance(value, str) else str(value)
        if len(text) > max_chars:
            return Limited(value=text[:max_chars], cut=True)
    return Limited(value=value)
