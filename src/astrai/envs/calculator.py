"""The calculator environment of the embedded tool task (``env=calculator`` on
``task=products``, issue 50, part 7): the policy is asked for a product of two 2-digit numbers,
which the tiny model cannot compute, and may call a ``multiply`` tool first.

The tiny model's character tokenizer has no ``<`` or ``{``, so this task's tool-call format is
a line of its own (``calc_line``): a turn ``c12*34`` calls ``multiply(a=12, b=34)``, a turn
``c`` alone calls it with its defaults, the question's two numbers; any other turn is the
answer. The environment replies ``=408`` to a call (``e`` to a malformed one, or to any call
when ``tool=False``: its replies stay within that alphabet) and ends the episode at the first
answer.

Rewards, dense enough for a model trained from scratch (as the embedded tasks' partial credit):
the answer turn earns the share of its characters that match the product
(``positional_match_reward``: 1 only for the product itself, which is ``solved``); the first
call (a turn starting with ``c``, well-formed or not) earns ``call_reward`` × the share of its
characters matching ``c``, so a policy is paid for calling before it has learnt to read the
tool's answer back. Measured on the tiny model from scratch (GRPO, 2 cores): without that
credit it settles on guessing digits (no call in 240 steps, the answers' partial credit ~0.2);
paid for typing the call with both numbers (``c12*34``) it had learnt no well-formed call in
170 steps, so the embedded task calls with the defaults.
"""

from __future__ import annotations

import re
from typing import Any

from astrai.envs.base import Message, StepResult
from astrai.envs.tool_calls import ParsedTurn, ParseError, ToolCall
from astrai.envs.tools import ToolEnvironment, ToolError, tool
from astrai.tasks.rewards import positional_match_reward

_CALL = re.compile(r"^c\s*(-?\d+)\s*\*\s*(-?\d+)\s*$")


def parse_calc_line(text: str) -> ParsedTurn:
    """``c<a>*<b>`` is a call of ``multiply``, ``c`` alone a call with its defaults; text
    starting with ``c`` otherwise is a malformed call; anything else is the turn's content (the
    answer)."""
    stripped = text.strip()
    if not stripped.startswith("c"):
        return ParsedTurn(content=stripped)
    if stripped == "c":
        return ParsedTurn(content="", calls=[ToolCall("multiply", {})])
    match = _CALL.match(stripped)
    if match is None:
        return ParsedTurn(content="", errors=[ParseError(stripped, "a call is c<int>*<int>")])
    a, b = int(match.group(1)), int(match.group(2))
    return ParsedTurn(content="", calls=[ToolCall("multiply", {"a": a, "b": b})])


_QUESTION = re.compile(r"^(-?\d+)\*(-?\d+)=?\??$")


class Calculator(ToolEnvironment):
    """``reset`` of a ``task=products`` row (``"12*34="``) asks ``12*34=``; a call is answered
    ``=<product>`` (a malformed or failed one ``e``), the first answer ends the episode.

    Args:
        tool: offer the tool; False answers every call ``e`` and pays nothing for it (the
            baseline a tool-less policy reaches).
        call_reward: the most the first call earns (module docstring), in [0, 1].
    """

    def __init__(self, tool: bool = True, call_reward: float = 0.5) -> None:
        if not 0 <= call_reward <= 1:
            raise ValueError(f"call_reward must be in [0, 1], got {call_reward}")
        self.offers_tool, self.call_reward = tool, call_reward

    @tool
    def multiply(self, a: int | None = None, b: int | None = None) -> int:
        """Multiply two integers.

        Args:
            a: the first factor (default: the question's first number).
            b: the second factor (default: the question's second number).
        """
        return (self.a if a is None else a) * (self.b if b is None else b)

    def tools(self) -> list[dict[str, Any]]:
        return self.schemas() if self.offers_tool else []

    def reset(self, row: dict[str, Any]) -> list[Message]:
        if "a" in row:
            a, b = int(row["a"]), int(row["b"])
        else:
            match = _QUESTION.match(str(row["text"]))
            if match is None:
                raise ValueError(f"not a product question: {row['text']!r} (task=products)")
            a, b = int(match.group(1)), int(match.group(2))
        self.a, self.b, self.product = a, b, a * b
        self.calls = 0
        question = str(row.get("text", f"{a}*{b}=?"))
        return [{"role": "user", "content": question}]

    def step(self, turn: ParsedTurn) -> StepResult:
        if not (turn.errors or turn.calls):  # the answer
            score = positional_match_reward(turn.content, str(self.product))
            return StepResult(reward=score, done=True, metrics={"solved": float(score == 1.0)})
        self.calls += 1
        reward = 0.0
        if self.calls == 1 and self.offers_tool:
            typed = turn.errors[0].text if turn.errors else _call_text(turn.calls[0])
            reward = self.call_reward * positional_match_reward(typed, "c")
        if turn.errors or not self.offers_tool:
            return StepResult(
                [{"role": "tool", "content": "e"}], reward, metrics={"tool_errors": 1.0}
            )
        try:
            replies = [f"={self.call(call)}" for call in turn.calls]
        except ToolError:
            return StepResult(
                [{"role": "tool", "content": "e"}], reward, metrics={"tool_errors": 1.0}
            )
        return StepResult([{"role": "tool", "content": r} for r in replies], reward=reward)


def _call_text(call: ToolCall) -> str:
    """A well-formed call as the policy types it: ``c12*34``, or ``c``."""
    if not call.arguments:
        return "c"
    return f"c{call.arguments.get('a')}*{call.arguments.get('b')}"
