"""Values at the door: what an environment or a turn parser returns, checked where the episode
runner receives it (issue 58, finding 9). User code returns whatever it returns: ``None`` for a
``StepResult``, bytes for a message's text, a NaN reward, a metric that is a string. Each such
value is a ``BadValue`` with a one-line reason naming what was wrong and where; the runner fails
that episode (``env/failed_invalid``) and logs the first of each kind once, never the run.

Accepted shapes:

- messages: a list of dicts with a ``role`` among ``ROLES`` and a text ``content``; the OpenAI
  parts-list form (``[{"type": "text", "text": ...}, ...]``) is accepted and joined as text.
- ``StepResult``: ``observations`` messages as above, a finite numeric ``reward``, ``done`` and
  ``truncated`` booleans, ``metrics`` a dict of names to finite numbers.
- a reward (``final_reward``): a finite number (``bool`` is refused: a ``True`` reward is
  almost always a ``solved`` flag returned by mistake).
- ``ParsedTurn``: text ``content``, ``calls`` a list of ``ToolCall``, ``errors`` a list of
  ``ParseError``.
"""

from __future__ import annotations

import math
from typing import Any

from astrai.envs.base import Message, StepResult
from astrai.envs.tool_calls import ParsedTurn, ParseError, ToolCall

# the roles a message may have (Llama 3.1's template reads a tool's reply as ``ipython``)
ROLES = frozenset({"system", "user", "assistant", "tool", "ipython"})
EXAMPLE_CHARS = 60  # how much of an offending value a reason quotes


class BadValue(ValueError):
    """A value an environment or parser returned that the runner cannot use; ``str()`` is
    the one-line reason."""


def _shown(value: Any) -> str:
    """``value`` as a reason quotes it: its type, and its ``repr`` cut to ``EXAMPLE_CHARS``."""
    text = repr(value)
    if len(text) > EXAMPLE_CHARS:
        text = text[:EXAMPLE_CHARS] + "..."
    return f"{type(value).__name__} {text}"


def finite_number(value: Any, what: str) -> float:
    """``value`` as a float when it is a finite int or float (not a bool); else ``BadValue``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadValue(f"{what} must be a number, got {_shown(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise BadValue(f"{what} must be finite, got {number}")
    return number


def _text(content: Any, what: str) -> str:
    """A message's content as text: a string, or the parts-list form joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    ):
        return "".join(part["text"] for part in content)
    raise BadValue(
        f"{what} must be text (a string, or a list of {{'type': 'text', 'text': ...}} parts), "
        f"got {_shown(content)}"
    )


def checked_messages(value: Any, what: str) -> list[Message]:
    """``value`` as a list of messages with text contents (module docstring); ``BadValue``
    naming ``what`` (e.g. ``"reset()"``) otherwise."""
    if not isinstance(value, list | tuple):
        raise BadValue(f"{what}: expected a list of messages, got {_shown(value)}")
    messages = []
    for i, message in enumerate(value):
        where = f"{what} message {i}"
        if not isinstance(message, dict):
            raise BadValue(f"{where} must be a dict with role and content, got {_shown(message)}")
        role = message.get("role")
        if role not in ROLES:
            raise BadValue(f"{where} has role {role!r}, not one of {', '.join(sorted(ROLES))}")
        content = _text(message.get("content"), f"{where}'s content")
        messages.append({**message, "content": content})
    return messages


def checked_step_result(value: Any) -> StepResult:
    """``value`` as a ``StepResult`` whose fields are what they say (module docstring)."""
    if not isinstance(value, StepResult):
        raise BadValue(f"step() must return a StepResult, got {_shown(value)}")
    metrics = value.metrics
    if not isinstance(metrics, dict):
        raise BadValue(f"StepResult.metrics must be a dict, got {_shown(metrics)}")
    for flag in ("done", "truncated"):
        if not isinstance(getattr(value, flag), bool):
            raise BadValue(f"StepResult.{flag} must be a bool, got {_shown(getattr(value, flag))}")
    return StepResult(
        observations=checked_messages(value.observations, "StepResult.observations"),
        reward=finite_number(value.reward, "StepResult.reward"),
        done=value.done,
        truncated=value.truncated,
        metrics={
            str(name): finite_number(number, f"StepResult.metrics[{name!r}]")
            for name, number in metrics.items()
        },
    )


def checked_parsed_turn(value: Any, parser: str) -> ParsedTurn:
    """``value`` as the ``ParsedTurn`` the turn parser ``parser`` should have returned."""
    what = f"the turn parser {parser}"
    if not isinstance(value, ParsedTurn):
        raise BadValue(f"{what} must return a ParsedTurn, got {_shown(value)}")
    if not isinstance(value.content, str):
        raise BadValue(f"{what}: ParsedTurn.content must be text, got {_shown(value.content)}")
    for field, kind in (("calls", ToolCall), ("errors", ParseError)):
        items = getattr(value, field)
        if not isinstance(items, list) or not all(isinstance(item, kind) for item in items):
            raise BadValue(
                f"{what}: ParsedTurn.{field} must be a list of {kind.__name__}, got {_shown(items)}"
            )
    return value
