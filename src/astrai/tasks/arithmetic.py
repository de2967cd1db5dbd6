"""Arithmetic tasks: ``AdditionTask`` ("12+7=" -> "19")."""

import random
import re
from collections.abc import Iterator

from astrai.tasks.base import _EVAL_SALT, _HASH_BUCKETS, Task, _stable_int


class AdditionTask(Task):
    """Add two non-negative integers with up to ``num_digits`` digits each.

    Prompt ``f"{a}+{b}="``, answer ``str(a + b)``, with ``a`` and ``b`` uniform in
    ``[0, 10**num_digits)``.

    Held-out split: for a pair ``a != b`` at most *one* order is held out (its twin ``b+a`` is
    trained) and doubles ``a+a`` always train. A from-scratch policy learns the sum table entry
    by entry; with 1-digit operands (100 entries) nothing lets it infer an entry it has never
    been rewarded on in either order (seen in a probe: held-out accuracy stalled at 14/17 —
    exactly the three held-out doubles wrong). Eval prompts are still never trained on, and
    getting them right needs a policy that treats ``a+b`` and ``b+a`` alike.

    Args:
        num_digits: maximum digits of the first operand (and the second by default), >= 1.
        eval_fraction: share of problems held out for evaluation, in (0, 0.5).
        num_digits_b: maximum digits of the second operand; None = ``num_digits``.
    """

    name = "addition"

    def __init__(
        self, num_digits: int = 1, eval_fraction: float = 0.2, num_digits_b: int | None = None
    ) -> None:
        if num_digits < 1:
            raise ValueError(f"num_digits must be >= 1, got {num_digits}")
        if num_digits_b is not None and num_digits_b < 1:
            raise ValueError(f"num_digits_b must be >= 1, got {num_digits_b}")
        self.num_digits_b = num_digits if num_digits_b is None else num_digits_b
        super().__init__(eval_fraction)
        if eval_fraction >= 0.5:
            raise ValueError(
                f"eval_fraction must be < 0.5 for addition (one order of a pair is held out), "
                f"got {eval_fraction}"
            )
        self.num_digits = num_digits
        # An operand is written as str(int): "0" or no leading zero, at most num_digits digits.
        operand_a = rf"(0|[1-9][0-9]{{0,{num_digits - 1}}})"
        operand_b = rf"(0|[1-9][0-9]{{0,{self.num_digits_b - 1}}})"
        self._pattern = re.compile(rf"{operand_a}\+{operand_b}=")

    def _operands(self, prompt: str) -> tuple[int, int]:
        match = self._pattern.fullmatch(prompt)
        if match is None:
            raise self._malformed(prompt)
        return int(match.group(1)), int(match.group(2))

    def answer(self, prompt: str) -> str:
        a, b = self._operands(prompt)
        return str(a + b)

    def is_held_out(self, prompt: str) -> bool:
        """One order of a selected pair ``{a, b}`` (``a != b``); pairs are selected with
        probability ``2 × eval_fraction`` so about ``eval_fraction`` of prompts are held out.
        Prompts whose twin is outside the problem space use the plain hash split."""
        a, b = self._operands(prompt)
        if a == b:
            return False
        if a >= 10**self.num_digits_b or b >= 10**self.num_digits:
            return super().is_held_out(prompt)  # no twin b+a in the problem space
        low, high = min(a, b), max(a, b)
        digest = _stable_int(f"{_EVAL_SALT}:{low}+{high}")
        selected = digest % _HASH_BUCKETS < 2 * self.eval_fraction * _HASH_BUCKETS
        held_out_order_is_ascending = (digest // _HASH_BUCKETS) % 2 == 0
        return selected and ((a < b) == held_out_order_is_ascending)

    def alphabet(self) -> str:
        return "+0123456789="

    def max_answer_len(self) -> int:
        return len(str(10**self.num_digits + 10**self.num_digits_b - 2))

    def max_prompt_len(self) -> int:
        return self.num_digits + self.num_digits_b + 2

    def _sample_problem(self, rng: random.Random) -> str:
        return f"{rng.randrange(10**self.num_digits)}+{rng.randrange(10**self.num_digits_b)}="

    def _num_problems(self) -> int:
        return 10 ** (self.num_digits + self.num_digits_b)

    def _enumerate_problems(self) -> Iterator[str]:
        for a in range(10**self.num_digits):
            for b in range(10**self.num_digits_b):
                yield f"{a}+{b}="


class ProductTask(Task):
    """Multiply two ``num_digits``-digit numbers of at least ``min_operand``: ``"47*86="`` ->
    ``"4042"``. Beyond what the tiny model computes: the calculator environment's task
    (``env=calculator``), where a tool gives the product; held out by the plain hash split.

    Args:
        num_digits: digits of each operand (no leading zero), >= 1.
        eval_fraction: share of problems held out for evaluation, in (0, 1).
        min_operand: the least operand (default the least ``num_digits``-digit number). The
            calculator preset's 32 makes every product 4 digits: a 1-layer model reads a reply
            of one width back reliably (mixed 3- and 4-digit products plateaued at 0.79).
    """

    name = "products"

    def __init__(
        self, num_digits: int = 2, eval_fraction: float = 0.2, min_operand: int | None = None
    ) -> None:
        if num_digits < 1:
            raise ValueError(f"num_digits must be >= 1, got {num_digits}")
        self.num_digits = num_digits
        least = 10 ** (num_digits - 1) if num_digits > 1 else 0
        low = least if min_operand is None else min_operand
        if not least <= low < 10**num_digits:
            raise ValueError(f"min_operand must be a {num_digits}-digit number, got {min_operand}")
        self._low = low
        super().__init__(eval_fraction)
        operand = rf"([1-9][0-9]{{{num_digits - 1}}})" if num_digits > 1 else "([0-9])"
        self._pattern = re.compile(rf"{operand}\*{operand}=")

    def operands(self, prompt: str) -> tuple[int, int]:
        match = self._pattern.fullmatch(prompt)
        if match is None or min(int(match.group(1)), int(match.group(2))) < self._low:
            raise self._malformed(prompt)
        return int(match.group(1)), int(match.group(2))

    def answer(self, prompt: str) -> str:
        a, b = self.operands(prompt)
        return str(a * b)

    def alphabet(self) -> str:
        return "*0123456789="

    def max_answer_len(self) -> int:
        return 2 * self.num_digits

    def max_prompt_len(self) -> int:
        return 2 * self.num_digits + 2

    def _sample_problem(self, rng: random.Random) -> str:
        high = 10**self.num_digits
        return f"{rng.randrange(self._low, high)}*{rng.randrange(self._low, high)}="

    def _num_problems(self) -> int:
        return (10**self.num_digits - self._low) ** 2

    def _enumerate_problems(self) -> Iterator[str]:
        for a in range(self._low, 10**self.num_digits):
            for b in range(self._low, 10**self.num_digits):
                yield f"{a}*{b}="


class HiddenNumberTask(Task):
    """A number from 1 to ``max_number`` to be found: the prompt ``"n7"`` names it for the
    environment (``env=guess``: the policy sees only ``"?"`` and the feedback), the answer is the
    number. Held out by the plain hash split.

    Args:
        max_number: the largest number, >= 2.
        eval_fraction: share of problems held out for evaluation, in (0, 1).
    """

    name = "hidden_number"

    def __init__(self, max_number: int = 15, eval_fraction: float = 0.2) -> None:
        if max_number < 2:
            raise ValueError(f"max_number must be >= 2, got {max_number}")
        self.max_number = max_number
        super().__init__(eval_fraction)

    def answer(self, prompt: str) -> str:
        if not re.fullmatch(r"n[1-9][0-9]*", prompt) or int(prompt[1:]) > self.max_number:
            raise self._malformed(prompt)
        return prompt[1:]

    def alphabet(self) -> str:
        return "n0123456789"

    def max_answer_len(self) -> int:
        return len(str(self.max_number))

    def max_prompt_len(self) -> int:
        return 1 + len(str(self.max_number))

    def _sample_problem(self, rng: random.Random) -> str:
        return f"n{rng.randint(1, self.max_number)}"

    def _num_problems(self) -> int:
        return self.max_number

    def _enumerate_problems(self) -> Iterator[str]:
        for n in range(1, self.max_number + 1):
            yield f"n{n}"
