"""String manipulation tasks on digit strings: ``ReverseTask`` and ``SortTask``."""

import abc
import itertools
import random
import re
from collections.abc import Iterator

from astrai.tasks.base import Task

_DIGITS = "0123456789"


class _DigitStringTask(Task):
    """Prompt ``f"{keyword} {s}="`` for a digit string ``s``; subclasses define ``_transform``.

    The length of ``s`` is uniform in ``[min_len, max_len]``, then each digit is uniform, so short
    strings are not drowned out by the (far more numerous) long ones.

    Args:
        min_len: shortest digit string, >= 1.
        max_len: longest digit string, >= min_len.
        eval_fraction: share of problems held out for evaluation, in (0, 1).
    """

    keyword: str

    def __init__(self, min_len: int = 3, max_len: int = 4, eval_fraction: float = 0.1) -> None:
        if min_len < 1:
            raise ValueError(f"min_len must be >= 1, got {min_len}")
        if max_len < min_len:
            raise ValueError(f"max_len must be >= min_len ({min_len}), got {max_len}")
        super().__init__(eval_fraction)
        self.min_len = min_len
        self.max_len = max_len
        self._pattern = re.compile(rf"{self.keyword} ([0-9]{{{min_len},{max_len}}})=")

    @staticmethod
    @abc.abstractmethod
    def _transform(digits: str) -> str:
        """Reference answer for the digit string ``digits``."""

    def answer(self, prompt: str) -> str:
        match = self._pattern.fullmatch(prompt)
        if match is None:
            raise self._malformed(prompt)
        return self._transform(match.group(1))

    def alphabet(self) -> str:
        return "".join(sorted(set(f"{self.keyword} {_DIGITS}=")))

    def max_answer_len(self) -> int:
        return self.max_len

    def max_prompt_len(self) -> int:
        return len(self.keyword) + self.max_len + 2

    def _sample_problem(self, rng: random.Random) -> str:
        length = rng.randint(self.min_len, self.max_len)
        digits = "".join(rng.choice(_DIGITS) for _ in range(length))
        return f"{self.keyword} {digits}="

    def _num_problems(self) -> int:
        return sum(10**length for length in range(self.min_len, self.max_len + 1))

    def _enumerate_problems(self) -> Iterator[str]:
        for length in range(self.min_len, self.max_len + 1):
            for digits in itertools.product(_DIGITS, repeat=length):
                yield f"{self.keyword} {''.join(digits)}="


class ReverseTask(_DigitStringTask):
    """Reverse a digit string: ``"rev 123="`` -> ``"321"``."""

    name = "reverse"
    keyword = "rev"

    @staticmethod
    def _transform(digits: str) -> str:
        return digits[::-1]


class SortTask(_DigitStringTask):
    """Sort the digits ascending: ``"sort 312="`` -> ``"123"``."""

    name = "sort"
    keyword = "sort"

    @staticmethod
    def _transform(digits: str) -> str:
        return "".join(sorted(digits))
