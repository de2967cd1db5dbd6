"""The calculator environment of the embedded tool task (issue 50, part 7; the task config and
its learning runs are not built yet): the policy is asked for a product of two 2-digit numbers,
which the tiny model cannot compute, and may call a ``multiply`` tool first.

The tiny model's character tokenizer has no ``<`` or ``{``, so this task's tool-call format is
a line of its own (``calc_line``): a turn ``c12*34`` calls ``multiply(a=12, b=34)``; any other
turn is the answer. The environment replies ``=408`` to a call (``e`` to a malformed one: its
replies stay within that alphabet) and ends the episode at the first answer: reward 1 when it
is the product, else 0.
"""

from __future__ import annotations

import re
from typing import Any

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn, ParseError, ToolCall
from astrai.envs.tools import ToolEnvironment, ToolError, tool

_CALL = re.compile(r"^c\s*(-?\d+)\s*\*\s*(-?\d+)\s*$")


def parse_calc_line(text: str) -> ParsedTurn:
    """``c<a>*<b>`` is a call of ``multiply``; text starting with ``c`` otherwise is a
    malformed call; anything else is the turn's content (the answer)."""
    stripped = text.strip()
    if not stripped.startswith("c"):
        return ParsedTurn(content=stripped)
    match = _CALL.match(stripped)
    if match is None:
        return ParsedTurn(content="", errors=[ParseError(stripped, "a call is c<int>*<int>")])
    a, b = int(match.group(1)), int(match.group(2))
    return ParsedTurn(content="", calls=[ToolCall("multiply", {"a": a, "b": b})])


class Calculator(ToolEnvironment, Environment):
    """``reset({"a": 12, "b": 34})`` asks ``12*34=?``; a call is answered ``=<product>`` (a
    malformed or failed one ``e``), the first answer ends the episode."""

    @tool
    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: the first factor.
            b: the second factor.
        """
        return a * b

    def reset(self, row: dict[str, Any]) -> list[Message]:
        self.product = int(row["a"]) * int(row["b"])
        self.calls = 0
        return [{"role": "user", "content": f"{row['a']}*{row['b']}=?"}]

    def step(self, turn: ParsedTurn) -> StepResult:
        if turn.errors:
            return StepResult([{"role": "tool", "content": "e"}], metrics={"parse_errors": 1.0})
        if turn.calls:
            self.calls += 1
            try:
                replies = [f"={self.call(call)}" for call in turn.calls]
            except ToolError:
                replies = ["e"]
            return StepResult([{"role": "tool", "content": reply} for reply in replies])
        solved = turn.content == str(self.product)
        return StepResult(reward=1.0 if solved else 0.0, done=True,
                          metrics={"tool_calls": float(self.calls)})  # fmt: skip
