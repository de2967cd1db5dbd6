"""Hand-checked scores of math_reward (Hugging Face math-verify), its errors, and its use from a
thread other than the main one."""

from __future__ import annotations

import threading

import pytest

from astrai.rewards.math import math_reward

GSM8K = "Natalia sold 48/2 = 24 clips in May.\n#### 72"


@pytest.mark.parametrize(
    ("response", "answer", "expected"),
    [
        # the same number in other forms
        ("72", "72", 1.0),
        ("\\boxed{72}", "72", 1.0),
        ("The answer is $72$.", "72", 1.0),
        ("72.0", "72", 1.0),
        ("71", "72", 0.0),
        ("-3", "-3", 1.0),
        ("3", "-3", 0.0),  # the sign counts
        ("1000", "1,000.", 1.0),  # thousands comma and a sentence's full stop in the reference
        ("The total is 1,000.", "1000", 1.0),
        ("\\boxed{1,000}", "1000", 1.0),
        ("1e3", "1000", 0.0),  # no scientific notation: math-verify reads the "1" alone
        # fractions, decimals, LaTeX
        ("$\\frac{1}{2}$", "0.5", 1.0),
        ("0.5", "\\frac{1}{2}", 1.0),
        ("1/2", "\\frac{1}{2}", 1.0),
        ("$\\dfrac{1}{2}$", "1/2", 1.0),
        ("$-\\frac{3}{4}$", "-0.75", 1.0),
        ("\\dfrac{1}{2}", "0.5", 0.0),  # bare LaTeX in a response, outside $ or \boxed: not read
        ("0.333333", "\\frac{1}{3}", 1.0),  # decimals compare rounded to 6 places
        ("$\\frac{1}{3}$", "0.3333", 0.0),  # ... so 4 places are another number
        ("$2^{10}$", "1024", 1.0),
        ("$3\\sqrt{3}$", "3\\sqrt{3}", 1.0),  # the reference is read as LaTeX, not as "3"
        ("3", "3\\sqrt{3}", 0.0),
        ("1.41421356", "\\sqrt{2}", 1.0),
        ("1.414", "\\sqrt{2}", 0.0),
        ("$x^2+1$", "x^2+1", 1.0),
        ("$1+x^2$", "x^2+1", 1.0),  # symbolic equality, not string equality
        # percentages as math-verify treats them: a response's "50%" matches 50 and 0.5 alike,
        # but a reference "50\%" is 50, so a response 0.5 misses it
        ("50%", "50", 1.0),
        ("50%", "0.5", 1.0),
        ("50", "50\\%", 1.0),
        ("0.5", "50\\%", 0.0),
        # intervals and sets
        ("$(1, 2]$", "(1, 2]", 1.0),
        ("$(1, 2)$", "(1, 2]", 0.0),  # open vs half-open
        ("$\\{1, 2\\}$", "\\{2, 1\\}", 1.0),  # sets ignore order
        # GSM8K records: only the text after "####" is the reference
        ("72", GSM8K, 1.0),
        ("The answer is \\boxed{72}", GSM8K, 1.0),
        ("72.0", GSM8K, 1.0),
        ("71", GSM8K, 0.0),
        # no answer at all
        ("", "72", 0.0),
        ("  \n", "72", 0.0),
        ("no idea", "72", 0.0),
        # several numbers: math-verify takes a \boxed{} one first, else the last one, except
        # that "the answer is" anchors the number after it
        ("I got 3 then 5 so 7", "7", 1.0),
        ("I got 3 then 5 so 7", "3", 0.0),
        ("first \\boxed{3} then 5", "3", 1.0),
        ("first \\boxed{3} then 5", "5", 0.0),
        ("$3$ and later 5", "5", 1.0),
        ("The answer is 72, not 71.", "72", 1.0),
        ("The answer is 72, not 71.", "71", 0.0),
        # two boxed answers become the set {3, 5}, which equals neither
        ("\\boxed{3} and \\boxed{5}", "3", 0.0),
        ("\\boxed{3} and \\boxed{5}", "5", 0.0),
    ],
)
def test_math_reward(response: str, answer: str, expected: float) -> None:
    assert math_reward(["prompt"], [response], [answer]) == [expected]


def test_batch_scores_each_row() -> None:
    # a GRPO group: one prompt's answer repeated for each sampled response
    responses = ["\\boxed{72}", "71", "", "It is 72."]
    scores = math_reward(["p"] * 4, responses, [GSM8K] * 4)
    assert scores == [1.0, 0.0, 0.0, 1.0]
    assert all(type(s) is float for s in scores)


def test_worker_thread_scores_like_main_thread() -> None:
    # math-verify's default SIGALRM timeouts raise ValueError outside the main thread
    responses = ["\\boxed{72}", "71", "$\\frac{1}{2}$", ""]
    answers: list[str | None] = [GSM8K, "72", "0.5", "72"]
    results: list[list[float]] = []
    errors: list[BaseException] = []

    def score() -> None:
        try:
            results.append(math_reward([""] * 4, responses, answers))
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=score)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert errors == []
    assert results == [[1.0, 0.0, 1.0, 0.0]]
    assert math_reward([""] * 4, responses, answers) == results[0]


def test_none_answer_raises() -> None:
    with pytest.raises(ValueError, match="set task.answer_key"):
        math_reward(["p", "p"], ["72", "72"], ["72", None])


@pytest.mark.parametrize("answer", ["", "#### ", "\\frac{1}", "\\boxed{}"])
def test_unreadable_reference_raises_naming_it(answer: str) -> None:
    # nothing after "####", or LaTeX SymPy cannot read: a data error, never a silent 0.0
    with pytest.raises(ValueError, match="cannot read the reference answer") as info:
        math_reward(["p"], ["72"], [answer])
    assert repr(answer) in str(info.value)


def test_lengths_must_match() -> None:
    with pytest.raises(ValueError):
        math_reward(["p", "p"], ["72"], ["72", "72"])
