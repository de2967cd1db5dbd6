"""Tool calls read from an assistant turn's sampled text, one parser per model family's format.

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call
  (Qwen2.5, Qwen3 and ChatML templates; Hermes' format). Generation stops after a call at
  ``</tool_call>``.
- ``llama3_json``: Llama 3.1-3.3's JSON tool calling, the turn's text one JSON object
  ``{"name": ..., "parameters": {...}}`` (or several separated by ``;``), optionally after
  ``<|python_tag|>``; the turn ends at the template's end-of-turn token.

A malformed call is not a crash: it becomes a ``ParseError`` the environment answers with a
tool error message the policy sees (and ``env/parse_errors`` counts). The text outside the
calls is kept as the turn's content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"


@dataclass(frozen=True)
class ToolCall:
    """One call: the tool's ``name`` and its ``arguments`` (a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParseError:
    """A call that could not be read: the offending ``text`` and ``why``, one line."""

    text: str
    why: str


@dataclass(frozen=True)
class SampledTurn:
    """What the engine saw and sampled for one turn, as the episode runner hands it to the
    environment with the parsed turn (an endpoint-backed environment returns it to its client:
    ``endpoint.agent``): ``prompt_ids`` [P] the episode's ids before the turn, ``token_ids`` [T]
    the turn's kept sampled ids and ``logprobs`` [T] their behaviour logprobs, ``version`` the
    policy version that sampled them, ``text`` their decoded text, ``stopped`` whether the turn
    ended at a stop id or stop string (else at a length limit), ``template`` the chat
    template's hash (``plain`` without one)."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    version: int
    text: str
    stopped: bool
    template: str = "plain"


@dataclass
class ParsedTurn:
    """An assistant turn read for tool calls: its ``content`` (the text outside the calls),
    the ``calls`` in order, and the ``errors`` of calls that could not be read; ``sampled``:
    its tokens (``SampledTurn``), set by the episode runner after the parser ran for an
    environment that reads them (``Environment.reads_tokens``), else None."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)
    sampled: SampledTurn | None = None


def _call(payload: str, arguments_key: str) -> ToolCall | ParseError:
    """``payload`` as ``{"name": str, <arguments_key>: object}``, or why not."""
    try:
        value = json.loads(payload)
    except json.JSONDecodeError as err:
        return ParseError(payload, f"not JSON: {err.msg} at character {err.pos}")
    if not isinstance(value, dict):
        return ParseError(payload, "a tool call is a JSON object")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return ParseError(payload, 'a tool call needs a "name" (a string)')
    arguments = value.get(arguments_key, {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return ParseError(payload, f'"{arguments_key}" is not a JSON object')
    if not isinstance(arguments, dict):
        return ParseError(payload, f'"{arguments_key}" is not a JSON object')
    return ToolCall(name, arguments)


def parse_hermes(text: str) -> ParsedTurn:
    """Every ``<tool_call>…</tool_call>`` block of ``text``; an unclosed last block (the turn
    was cut) is an error. The content is the text before the first block."""
    turn = ParsedTurn(content=text.split(HERMES_OPEN, 1)[0].strip())
    rest = text
    while (start := rest.find(HERMES_OPEN)) != -1:
        rest = rest[start + len(HERMES_OPEN) :]
        end = rest.find(HERMES_CLOSE)
        if end == -1:
            turn.errors.append(ParseError(rest.strip(), f"no {HERMES_CLOSE} after {HERMES_OPEN}"))
            break
        parsed = _call(rest[:end].strip(), "arguments")
        (turn.calls if isinstance(parsed, ToolCall) else turn.errors).append(parsed)  # type: ignore[arg-type]
        rest = rest[end + len(HERMES_CLOSE) :]
    return turn


_LLAMA3_CALL = re.compile(r"^\s*\{.*\}\s*$", re.DOTALL)


def parse_llama3_json(text: str) -> ParsedTurn:
    """The turn as Llama 3's JSON tool calls: the whole text (after ``<|python_tag|>``, if
    any) one JSON object with ``name`` and ``parameters``, or several separated by ``;``. A
    turn that does not start with ``{`` (or the tag) is plain content, no call."""
    body = text.strip()
    tagged = body.startswith(PYTHON_TAG)
    if tagged:
        body = body[len(PYTHON_TAG) :].strip()
    if not body.startswith("{"):
        return ParsedTurn(content=text.strip())
    turn = ParsedTurn(content="")
    # one object (its strings may hold ";"), else several separated by ";"
    pieces = [body] if _is_object(body) else [p for p in body.split(";") if p.strip()]
    for piece in pieces:
        if not _LLAMA3_CALL.match(piece):
            turn.errors.append(ParseError(piece.strip(), "a tool call is one JSON object"))
            continue
        parsed = _call(piece.strip(), "parameters")
        (turn.calls if isinstance(parsed, ToolCall) else turn.errors).append(parsed)  # type: ignore[arg-type]
    return turn


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


# the parser of each format, and the text after which generation stops for a call
PARSERS: dict[str, Callable[[str], ParsedTurn]] = {
    "hermes": parse_hermes,
    "llama3_json": parse_llama3_json,
}
STOP_STRINGS: dict[str, list[str]] = {"hermes": [HERMES_CLOSE], "llama3_json": []}
