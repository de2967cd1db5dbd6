"""Hand-computed scores of the text-similarity rewards (``astrai.rewards.similarity``), their
``conf/reward/`` options and their errors."""

from __future__ import annotations

import math

import pytest
from tests.helpers import compose_config

from astrai.config.errors import ConfigError
from astrai.rewards.similarity import Bleu, Chrf, edit_similarity, rouge_l

# torchmetrics computes in float32
APPROX = {"rel": 1e-6, "abs": 1e-7}


def one(fn: object, response: str, answer: str | None) -> float:
    """The score of a single (prompt, response, answer) row."""
    (score,) = fn(["p"], [response], [answer])  # type: ignore[operator]
    return score


@pytest.mark.parametrize(
    ("response", "answer", "expected"),
    [
        # words the cat sat on the mat / the cat is on the mat: LCS "the cat on the mat" = 5,
        # P = R = 5/6, F = 5/6
        ("the cat sat on the mat", "the cat is on the mat", 5 / 6),
        # LCS "a c" = 2: P = 2/4, R = 2/2, F = 2 · 0.5 · 1 / 1.5 = 2/3
        ("a b c d", "a c", 2 / 3),
        # order counts: LCS of "b a" and "a b" is 1 word, P = R = 1/2
        ("b a", "a b", 1 / 2),
        # lowercased, punctuation a separator: the same two words
        ("The Cat!", "the cat", 1.0),
        ("x", "y", 0.0),
        ("", "a", 0.0),  # no words in the response
    ],
)
def test_rouge_l_is_the_lcs_f_measure(response: str, answer: str, expected: float) -> None:
    assert one(rouge_l, response, answer) == pytest.approx(expected, **APPROX)


BLEU_4 = Bleu(n_gram=4, smooth=True)


@pytest.mark.parametrize(
    ("response", "answer", "expected"),
    [
        # response the cat sat on the mat (6 tokens), reference the cat sat on a mat (6):
        # p1 = 5/6 (the ×2 clipped to the reference's 1; cat sat on mat)
        # p2 = (3 + 1)/(5 + 1): the-cat cat-sat sat-on of 5 bigrams
        # p3 = (2 + 1)/(4 + 1): the-cat-sat cat-sat-on of 4
        # p4 = (1 + 1)/(3 + 1): the-cat-sat-on of 3
        # BP = exp(1 - 6/6) = 1; BLEU = (5/6 · 4/6 · 3/5 · 2/4)^(1/4) = (1/6)^(1/4)
        ("the cat sat on the mat", "the cat sat on a mat", (1 / 6) ** 0.25),
        # every n-gram of the 4 tokens matches, p1..p4 = 1, BP = exp(1 - 6/4) = exp(-1/2)
        ("the cat sat on", "the cat sat on the mat", math.exp(-0.5)),
        ("the cat sat on the mat", "the cat sat on the mat", 1.0),
        # 13a tokens: "Hello , world !" either way
        ("Hello, world!", "Hello , world !", 1.0),
        # no 4-gram matches (the-cat-sat-on vs the-cat-is-on ...): 0, smoothing or not
        ("the cat sat on the mat", "the cat is on the mat", 0.0),
        ("", "x", 0.0),
    ],
)
def test_bleu_is_smoothed_ngram_precision_times_brevity_penalty(
    response: str, answer: str, expected: float
) -> None:
    assert one(BLEU_4, response, answer) == pytest.approx(expected, **APPROX)


def test_bleu_without_smoothing_and_of_a_lower_order() -> None:
    # unsmoothed: p2 = 3/5, p3 = 2/4, p4 = 1/3 -> (5/6 · 3/5 · 2/4 · 1/3)^(1/4) = (1/12)^(1/4)
    plain = Bleu(n_gram=4, smooth=False)
    assert one(plain, "the cat sat on the mat", "the cat sat on a mat") == pytest.approx(
        (1 / 12) ** 0.25, **APPROX
    )
    # BLEU-2 of "the cat is on the mat" (0 at BLEU-4 above): p1 = 5/6, p2 = (3 + 1)/(5 + 1)
    # (the-cat on-the the-mat), BP = 1 -> (5/6 · 4/6)^(1/2) = (5/9)^(1/2)
    assert one(
        Bleu(n_gram=2, smooth=True), "the cat sat on the mat", "the cat is on the mat"
    ) == pytest.approx((5 / 9) ** 0.5, **APPROX)


CHRF = Chrf(n_char_order=6, n_word_order=0, beta=2.0)


def f_beta(p: float, r: float, beta: float = 2.0) -> float:
    return (1 + beta**2) * p * r / (beta**2 * p + r) if p + r else 0.0


@pytest.mark.parametrize(
    ("response", "answer", "expected"),
    [
        # "thecat" both (spaces dropped): every order 1..6 matches fully
        ("the cat", "the cat", 1.0),
        # abc / abd: n=1 P = R = 2/3 (a, b); n=2 P = R = 1/2 (ab of ab,bc / ab,bd); n=3 0;
        # n=4..6 no n-grams, 0. F_n = P_n when P_n = R_n: (2/3 + 1/2) / 6 = 7/36
        ("abc", "abd", 7 / 36),
        # ab / abcd: n=1 P = 1, R = 2/4; n=2 P = 1, R = 1/3 (ab of ab,bc,cd); n>=3 none in ab
        ("ab", "abcd", (f_beta(1, 1 / 2) + f_beta(1, 1 / 3)) / 6),
        ("xyz", "abc", 0.0),
    ],
)
def test_chrf_is_the_mean_char_ngram_f_beta(response: str, answer: str, expected: float) -> None:
    assert one(CHRF, response, answer) == pytest.approx(expected, **APPROX)


def test_chrf_orders_and_word_ngrams() -> None:
    # two char orders: F(1, 1/2) = 5 · 0.5 / 4.5 = 5/9, F(1, 1/3) = (5/3)/(13/3) = 5/13
    two = Chrf(n_char_order=2, n_word_order=0, beta=2.0)
    assert one(two, "ab", "abcd") == pytest.approx((5 / 9 + 5 / 13) / 2, **APPROX)
    # chrF++ with one char and one word order: "ab c" / "ab d": chars a,b,c vs a,b,d
    # P = R = 2/3; words [ab, c] vs [ab, d] P = R = 1/2; mean (2/3 + 1/2) / 2 = 7/12
    plus = Chrf(n_char_order=1, n_word_order=1, beta=2.0)
    assert one(plus, "ab c", "ab d") == pytest.approx(7 / 12, **APPROX)
    # beta = 1 weighs recall as precision: F = 2 · 1 · 1/2 / 1.5 = 2/3 for "ab" / "abcd", n = 1
    assert one(Chrf(1, 0, 1.0), "ab", "abcd") == pytest.approx(2 / 3, **APPROX)


@pytest.mark.parametrize(
    ("response", "answer", "expected"),
    [
        ("kitten", "sitting", 1 - 3 / 7),  # k->s, e->i, +g: d = 3, longer 7
        ("rain", "shine", 1 - 3 / 5),  # r->s, a->h, +e
        ("abc", " abc\n", 1.0),  # surrounding whitespace ignored
        ("Abc", "abc", 1 - 1 / 3),  # case kept
        ("", "abc", 0.0),
        ("abc", "", 0.0),  # three insertions, longer 3
        ("", "", 1.0),
        # 60 a then 60 b vs 60 b: delete the a's, d = 60 of 120. torchmetrics' edit_distance
        # (a band of 25 around the diagonal) says 65 here; the exact distance is the reward's
        ("a" * 60 + "b" * 60, "b" * 60, 0.5),
    ],
)
def test_edit_similarity_is_one_minus_normalised_levenshtein(
    response: str, answer: str, expected: float
) -> None:
    assert one(edit_similarity, response, answer) == pytest.approx(expected, **APPROX)


def test_torchmetrics_edit_distance_is_banded_so_the_reward_does_not_use_it() -> None:
    # the case above: torchmetrics' edit_distance keeps to TER's band of 25 around the diagonal
    # and says 65 (docs/data-and-rewards.md); the exact distance is 60
    from torchmetrics.functional.text import edit_distance

    assert edit_distance(["a" * 60 + "b" * 60], ["b" * 60], reduction="none").tolist() == [65]


@pytest.mark.parametrize("fn", [rouge_l, BLEU_4, CHRF, edit_similarity])
def test_a_batch_is_scored_row_by_row_and_needs_answers(fn: object) -> None:
    text = "the cat sat on the mat"
    scores = fn(["p", "q"], [text, "xyz"], [text, text])  # type: ignore[operator]
    assert scores[0] == pytest.approx(1.0, **APPROX) and scores[1] == 0.0
    with pytest.raises(ValueError, match=r"compares with reference answers: set task\.answer_key"):
        fn(["p", "q"], ["a", "b"], ["a", None])  # type: ignore[operator]


def test_a_bad_key_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"reward\.n_gram must be an integer >= 1, got 0"):
        compose_config(["reward=bleu", "reward.n_gram=0"])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Bleu(n_gram=1.5, smooth=True), "reward.n_gram must be an integer >= 1, got 1.5"),
        (lambda: Bleu(n_gram=4, smooth="yes"), "reward.smooth must be true or false, got 'yes'"),
        (lambda: Chrf(6, 0, beta=0), "reward.beta must be a number > 0, got 0"),
        (lambda: Chrf(6, -1, 2.0), "reward.n_word_order must be an integer >= 0, got -1"),
        (lambda: Chrf(True, 0, 2.0), "reward.n_char_order must be an integer >= 1, got True"),
    ],
)
def test_bad_arguments_name_the_key(make: object, message: str) -> None:
    with pytest.raises(ValueError) as err:
        make()  # type: ignore[operator]
    assert str(err.value) == message
