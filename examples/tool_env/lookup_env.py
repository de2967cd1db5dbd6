"""A user's own tool environment, outside the astrai package (docs/environments.md):

    PYTHONPATH=examples/tool_env python train.py task=dataset \\
        task.train_path=examples/tool_env/tasks.jsonl \\
        env=custom env._target_=lookup_env.Lookup env.parser=lookup_env.parse_lookup

Each task row asks for the code of a word (``"code of kiwi?"``, answer ``"47"``); the policy may
call the ``lookup`` tool first (a turn ``l:kiwi``, answered ``=47``), then answers. The format
keeps to the tiny character model's alphabet; for a chat model, use ``env.parser=hermes``
(``<tool_call>{"name": "lookup", "arguments": {"word": "kiwi"}}</tool_call>``) and the same
class: its ``@tool`` method's schema is what the chat template is given.
"""

from __future__ import annotations

import re
from typing import Any

from astrai.envs import ParsedTurn, StepResult, ToolCall, ToolEnvironment, tool

CODES = {"kiwi": 47, "plum": 12, "fig": 83, "lime": 35, "pear": 60, "date": 29}


def parse_lookup(text: str) -> ParsedTurn:
    """``l:<word>`` calls ``lookup(word=...)``; any other turn is the answer."""
    match = re.fullmatch(r"l:([a-z]+)", text.strip())
    if match is None:
        return ParsedTurn(content=text.strip())
    return ParsedTurn(content="", calls=[ToolCall("lookup", {"word": match.group(1)})])


class Lookup(ToolEnvironment):
    """Asks the row's question; a ``lookup`` call is answered ``=<code>``; the first answer
    ends the episode, reward 1 when it is the row's answer (``solved``).

    Args:
        call_bonus: what a well-formed call earns (once), to start a policy from scratch.
    """

    def __init__(self, call_bonus: float = 0.25) -> None:
        self.call_bonus = call_bonus

    @tool
    def lookup(self, word: str) -> int:
        """The code of a word.

        Args:
            word: a fruit's name.
        """
        return CODES[word]

    def reset(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        self.answer, self.called = row["answer"], False
        return [{"role": "user", "content": row["text"]}]

    def step(self, turn: ParsedTurn) -> StepResult:
        if turn.calls:
            bonus = 0.0 if self.called else self.call_bonus
            self.called = True
            try:
                reply = f"={self.call(turn.calls[0])}"
            except Exception:  # noqa: BLE001 (an unknown word: the policy reads the error)
                return StepResult([{"role": "tool", "content": "e"}], reward=bonus,
                                  metrics={"tool_errors": 1.0})  # fmt: skip
            return StepResult([{"role": "tool", "content": reply}], reward=bonus)
        solved = turn.content == self.answer
        return StepResult(reward=float(solved), done=True, metrics={"solved": float(solved)})
