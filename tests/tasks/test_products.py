"""``ProductTask`` and ``HiddenNumberTask``: the embedded multi-turn tasks' problems."""

from __future__ import annotations

import pytest

from astrai.tasks.arithmetic import HiddenNumberTask, ProductTask


def test_products_of_four_digits_split_and_answered() -> None:
    task = ProductTask(num_digits=2, min_operand=32)
    problems = task.train_problems(0, 0, 200)
    for problem in problems:
        a, b = task.operands(problem.text)
        assert 32 <= a <= 99 and 32 <= b <= 99
        assert problem.answer == str(a * b) and len(problem.answer) == 4
    held_out = {p.text for p in task.eval_problems(10_000)}
    assert held_out and not held_out & {p.text for p in problems}
    assert len(held_out) + task.split_sizes()[0] == 68 * 68
    with pytest.raises(ValueError, match="malformed prompt '12\\*40='"):
        task.answer("12*40=")  # below min_operand
    with pytest.raises(ValueError, match="min_operand must be a 2-digit number"):
        ProductTask(min_operand=100)
    assert ProductTask().answer("10*10=") == "100"


def test_hidden_numbers_name_their_number() -> None:
    task = HiddenNumberTask(max_number=15)
    assert task.answer("n7") == "7"
    every = {p.text for p in task.train_problems(0, 0, 100)} | {
        p.text for p in task.eval_problems(100)
    }
    assert every == {f"n{n}" for n in range(1, 16)}
    with pytest.raises(ValueError, match="malformed"):
        task.answer("n16")
