"""Hand-computed scores of the built-in rewards (``astrai.rewards.builtin``) and their errors."""

from __future__ import annotations

import pytest

from astrai.rewards.builtin import (
    RegexMatch,
    TargetLength,
    exact_match,
    final_answer,
    partial_credit,
)


def one(fn: object, response: str, answer: str | None = None) -> float:
    """The score of a single (prompt, response, answer) row."""
    (score,) = fn(["p"], [response], [answer])  # type: ignore[operator]
    return score


@pytest.mark.parametrize(
    ("response", "answer", "expected"),
    [
        ("8", "8", 1.0),
        (" 8\n", "8", 1.0),  # whitespace around the response is ignored
        ("8", "\t8 ", 1.0),  # ... and around the answer
        ("8 0", "80", 0.0),  # but not inside
        ("80", "8", 0.0),
        ("Yes", "yes", 0.0),  # case sensitive
        ("", "8", 0.0),
        ("", "", 1.0),
    ],
)
def test_exact_match(response: str, answer: str, expected: float) -> None:
    assert one(exact_match, response, answer) == expected


def test_exact_match_scores_a_batch_row_by_row() -> None:
    scores = exact_match(["a", "a", "b"], ["1", "2", " 3 "], ["1", "1", "3"])
    assert scores == [1.0, 0.0, 1.0]


def test_exact_match_needs_answers() -> None:
    with pytest.raises(ValueError, match=r"exact_match .*task\.answer_key"):
        exact_match(["a", "b"], ["1", "2"], ["1", None])


@pytest.mark.parametrize(
    ("response", "answer", "expected"),
    [
        ("19", "19", 1.0),
        ("190", "19", 2 / 3),  # '1','9' match; the extra '0' counts in max(3, 2) = 3
        ("1", "19", 1 / 2),  # '1' matches; max(1, 2) = 2
        ("18", "19", 1 / 2),
        ("91", "19", 0.0),  # no position agrees
        ("", "19", 0.0),  # 0 matches / max(0, 2)
        ("", "", 1.0),  # both empty: an exact match
    ],
)
def test_partial_credit(response: str, answer: str, expected: float) -> None:
    assert one(partial_credit, response, answer) == pytest.approx(expected)


def test_partial_credit_needs_answers() -> None:
    with pytest.raises(ValueError, match=r"task\.answer_key"):
        partial_credit(["a"], ["1"], [None])


@pytest.mark.parametrize(
    ("pattern", "response", "expected"),
    [
        (r"\d+", "the answer is 42.", 1.0),  # re.search: a match inside is enough
        (r"\d+", "no digits", 0.0),
        (r"^[0-9]+$", "123", 1.0),  # anchored: the whole response
        (r"^[0-9]+$", "x123", 0.0),
        (r"^[0-9]+$", "123x", 0.0),
        (r"^[0-9]+$", "", 0.0),
        (r"a.b", "a\nb", 1.0),  # DOTALL: `.` matches a newline
        (r"^<think>.*</think>\d+$", "<think>\n1+1\n</think>2", 1.0),
        (r"^<think>.*</think>\d+$", "<think>\n1+1\n</think>", 0.0),
    ],
)
def test_regex_match(pattern: str, response: str, expected: float) -> None:
    assert one(RegexMatch(pattern), response) == expected


def test_regex_match_ignores_answers_and_scores_each_row() -> None:
    scores = RegexMatch("^a")(["p", "q", "r"], ["ab", "ba", "a"], [None, "x", None])
    assert scores == [1.0, 0.0, 1.0]


def test_regex_match_refuses_an_invalid_pattern() -> None:
    with pytest.raises(ValueError, match=r"reward\.pattern '\(ab' is no regular expression"):
        RegexMatch("(ab")


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        (4, 1.0),  # exactly the target
        (2, 0.5),  # 1 - |2 - 4| / 4
        (6, 0.5),  # 1 - |6 - 4| / 4
        (8, 0.0),  # 1 - 4 / 4
        (12, 0.0),  # 1 - 8 / 4 = -1, floored at 0
    ],
)
def test_target_length(length: int, expected: float) -> None:
    assert one(TargetLength(4), "x" * length) == expected


@pytest.mark.parametrize("target", [0, -1, 2.5])
def test_target_length_refuses_a_bad_target(target: object) -> None:
    with pytest.raises(ValueError, match=r"reward\.target must be a positive number"):
        TargetLength(target)  # type: ignore[arg-type]


def test_a_gsm8k_reference_is_compared_by_its_final_part() -> None:
    answers = ["She has 3 + 4 = 7 apples.\n#### 7"] * 3
    assert final_answer(answers[0]) == "7"
    assert final_answer("no marker") == "no marker"  # untouched, whitespace too
    assert exact_match(["q"] * 3, ["7", " 7 ", "8"], answers) == [1.0, 1.0, 0.0]
    # partial: "17" vs "7": no position matches ('1' != '7'), 0 / 2
    assert partial_credit(["q"] * 3, ["7", "17", ""], answers) == [1.0, 0.0, 0.0]
