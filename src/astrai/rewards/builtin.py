"""The built-in rewards: batched functions ``(prompts, responses, answers) -> list[float]``.

``prompts``, ``responses`` and ``answers`` are parallel lists, one entry per sampled response
(B prompts × G responses flattened); responses are decoded without special tokens. An answer is
None when the task has none (``task.answer_key=null``); a reward that needs one says so.

A reference answer in GSM8K's shape (a worked solution ending in ``#### <answer>``) is compared
by its final part: every reward that reads answers (``exact_match``, ``partial``, ``math``)
takes the text after the last ``####``, stripped (``final_answer``).
"""

from __future__ import annotations

import re

from astrai.tasks.rewards import positional_match_reward

GSM8K_MARKER = "####"


def final_answer(answer: str) -> str:
    """The part of a reference a response is compared with: after the last ``####``, if any."""
    return answer.rsplit(GSM8K_MARKER, 1)[-1].strip() if GSM8K_MARKER in answer else answer


def _answers(name: str, answers: list[str | None]) -> list[str]:
    if any(a is None for a in answers):
        raise ValueError(f"reward {name} compares with reference answers: set task.answer_key")
    return [final_answer(a) for a in answers if a is not None]


def exact_match(prompts: list[str], responses: list[str], answers: list[str | None]) -> list[float]:
    """1.0 when the response equals the reference answer (surrounding whitespace ignored)."""
    gold = _answers("exact_match", answers)
    return [float(r.strip() == a.strip()) for r, a in zip(responses, gold, strict=True)]


def partial_credit(
    prompts: list[str], responses: list[str], answers: list[str | None]
) -> list[float]:
    """The embedded tasks' reward: matching character positions / the longer length, so 1.0
    only for the exact answer (``astrai.tasks.rewards.positional_match_reward``)."""
    gold = _answers("partial", answers)
    return [positional_match_reward(r, a) for r, a in zip(responses, gold, strict=True)]


class RegexMatch:
    """1.0 when ``pattern`` matches somewhere in the response (``re.search``; ``.`` also
    matches newlines): anchor it with ``^...$`` to demand a whole format."""

    def __init__(self, pattern: str) -> None:
        try:
            self.pattern = re.compile(pattern, re.DOTALL)
        except re.error as err:
            raise ValueError(f"reward.pattern {pattern!r} is no regular expression: {err}") from err

    def __call__(
        self, prompts: list[str], responses: list[str], answers: list[str | None]
    ) -> list[float]:
        return [float(self.pattern.search(r) is not None) for r in responses]


class TargetLength:
    """1 − |len − target| / target, floored at 0: 1.0 at exactly ``target`` characters."""

    def __init__(self, target: int) -> None:
        if isinstance(target, bool) or not isinstance(target, int) or target < 1:
            raise ValueError(f"reward.target must be a positive number of characters, got {target}")
        self.target = target

    def __call__(
        self, prompts: list[str], responses: list[str], answers: list[str | None]
    ) -> list[float]:
        return [max(0.0, 1.0 - abs(len(r) - self.target) / self.target) for r in responses]
