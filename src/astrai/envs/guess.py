"""The guessing environment of the embedded feedback task (``env=guess`` on
``task=hidden_number``, issue 50, part 7): the policy is to find a hidden number from 1 to N
over several turns, told after each guess whether the number is higher (``h``) or lower
(``l``); anything but a number in range is answered ``e``.

A guess of the number ends the episode with reward ``1 - turn_cost × (turns - 1)`` (at least
``min_reward``): found sooner pays more, so a policy that learns to halve the range (binary
search: at most 4 turns for 15) beats one that walks through it. ``solved`` counts an episode
that found it at all. An episode that ran out of turns earns ``closeness`` × how near its last
guess was (``final_reward``): a policy from scratch rarely finds the number by chance, and this
credit (below ``min_reward``, so any find pays more) is what it first learns from.
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
        max_number: the largest number (``task.max_number``'s).
        turn_cost: what each turn after the first takes off the reward, in [0, 1).
        min_reward: the least a found number pays, in [0, 1].
        closeness: the most an unsolved episode earns, in [0, ``min_reward``).
    """

    def __init__(
        self,
        max_number: int = 15,
        turn_cost: float = 0.1,
        min_reward: float = 0.3,
        closeness: float = 0.2,
    ) -> None:
        if not 0 <= turn_cost < 1:
            raise ValueError(f"turn_cost must be in [0, 1), got {turn_cost}")
        if not 0 <= min_reward <= 1:
            raise ValueError(f"min_reward must be in [0, 1], got {min_reward}")
        if not 0 <= closeness < min_reward or min_reward == 0:
            raise ValueError(f"closeness must be in [0, min_reward), got {closeness}")
        self.max_number, self.turn_cost = max_number, turn_cost
        self.min_reward, self.closeness = min_reward, closeness

    def reset(self, row: dict[str, Any]) -> list[Message]:
        text = str(row["text"])
        if not re.fullmatch(r"n[1-9][0-9]*", text):
            raise ValueError(f"not a hidden number: {text!r} (task=hidden_number)")
        self.target, self.turns, self.found = int(text[1:]), 0, False
        self.last: int | None = None  # the last valid guess
        if self.target > self.max_number:
            raise ValueError(f"{text!r} is above env.max_number {self.max_number}")
        return [{"role": "user", "content": "?"}]

    def step(self, turn: ParsedTurn) -> StepResult:
        self.turns += 1
        if not _GUESS.match(turn.content):
            return StepResult([{"role": "user", "content": "e"}], metrics={"invalid": 1.0})
        guess = self.last = int(turn.content)
        if guess == self.target:
            self.found = True
            reward = max(self.min_reward, 1.0 - self.turn_cost * (self.turns - 1))
            return StepResult(reward=reward, done=True, metrics={"solved": 1.0})
        hint = "h" if guess < self.target else "l"
        return StepResult([{"role": "user", "content": hint}])

    def final_reward(self) -> float:
        if self.found or self.last is None:
            return 0.0
        return self.closeness * max(0.0, 1.0 - abs(self.last - self.target) / self.max_number)
