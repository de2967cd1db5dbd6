"""The guessing environment of the embedded feedback task (``env=guess`` on
``task=hidden_number``, issue 50, part 7): the policy is to find a hidden number from 1 to N
over several turns, told after each guess whether the number is higher (``h``) or lower
(``l``); anything but a number in range is answered ``e``.

A guess of the number ends the episode with reward ``1 - turn_cost × (turns - 1)`` (at least
``min_reward``): found sooner pays more, so a policy that learns to halve the range (binary
search: at most 4 turns for 15) beats one that walks through it. ``solved`` counts an episode
that found it at all.
"""

from __future__ import annotations

import re
from typing import Any

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn

_GUESS = re.compile(r"^[1-9][0-9]*$")


class Guess(Environment):
    """``reset`` of a ``task=hidden_number`` row (``"n7"``) opens with ``"?"``; each guess is
    answered ``h``/``l`` (``e`` for no number) until it is the number.

    Args:
        turn_cost: what each turn after the first takes off the reward, in [0, 1).
        min_reward: the least a found number pays, in [0, 1].
    """

    def __init__(self, turn_cost: float = 0.15, min_reward: float = 0.1) -> None:
        if not 0 <= turn_cost < 1:
            raise ValueError(f"turn_cost must be in [0, 1), got {turn_cost}")
        if not 0 <= min_reward <= 1:
            raise ValueError(f"min_reward must be in [0, 1], got {min_reward}")
        self.turn_cost, self.min_reward = turn_cost, min_reward

    def reset(self, row: dict[str, Any]) -> list[Message]:
        text = str(row["text"])
        if not re.fullmatch(r"n[1-9][0-9]*", text):
            raise ValueError(f"not a hidden number: {text!r} (task=hidden_number)")
        self.target, self.turns = int(text[1:]), 0
        return [{"role": "user", "content": "?"}]

    def step(self, turn: ParsedTurn) -> StepResult:
        self.turns += 1
        if not _GUESS.match(turn.content):
            return StepResult([{"role": "user", "content": "e"}], metrics={"invalid": 1.0})
        guess = int(turn.content)
        if guess == self.target:
            reward = max(self.min_reward, 1.0 - self.turn_cost * (self.turns - 1))
            return StepResult(reward=reward, done=True, metrics={"solved": 1.0})
        hint = "h" if guess < self.target else "l"
        return StepResult([{"role": "user", "content": hint}])
