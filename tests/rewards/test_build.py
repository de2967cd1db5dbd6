"""``build_reward``: every ``conf/reward/`` option built and scored, term names, a user's own
reward (a function or a class, directly and through Hydra), the config errors, ``Reward``'s
weighted sums, and the check ``validate_config`` runs before a run."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.helpers import compose_config

from astrai.config.errors import ConfigError
from astrai.paths import CONFIG_DIR
from astrai.rewards.base import (
    Reward,
    RewardConfigError,
    RewardError,
    RewardTerm,
    default_name,
)
from astrai.rewards.build import build_reward
from astrai.rewards.builtin import TargetLength, partial_credit
from astrai.rewards.config import reward_node

# (responses, answers) -> names, totals; each hand-computed in the comment
OPTIONS: dict[str, tuple[list[str], list[str], list[str], list[float]]] = {
    # partial credit: '8' of "80" matches one of max(2, 1) = 2 positions
    "partial": (["8", "80", "x"], ["8", "8", "8"], ["partial_credit"], [1.0, 0.5, 0.0]),
    "exact_match": ([" 8 ", "80", "x"], ["8", "8", "8"], ["exact_match"], [1.0, 0.0, 0.0]),
    # pattern ^[0-9]+$
    "regex": (["8", "80", "x"], ["8", "8", "8"], ["regex_match"], [1.0, 1.0, 0.0]),
    # target 64: 1 - |48 - 64| / 64 = 0.75; 1 - |128 - 64| / 64 = 0
    "length": (
        ["a" * 64, "a" * 48, "a" * 128],
        ["8", "8", "8"],
        ["target_length"],
        [1.0, 0.75, 0.0],
    ),
    # 0.9 * partial + 0.1 * format: "8" 0.9 * 1 + 0.1 * 1; "80" 0.9 * 0.5 + 0.1 * 1 = 0.55;
    # "x" 0.9 * 0 + 0.1 * 0
    "weighted": (["8", "80", "x"], ["8", "8", "8"], ["partial", "format"], [1.0, 0.55, 0.0]),
    "math": (["\\boxed{72}", "71", "$72$"], ["72", "72", "72"], ["math"], [1.0, 0.0, 1.0]),
    # the similarity rewards, each case worked out in tests/rewards/test_similarity.py
    "rouge_l": (
        ["the cat sat on the mat", "a b c d", "x"],
        ["the cat is on the mat", "a c", "y"],
        ["rouge_l"],
        [5 / 6, 2 / 3, 0.0],
    ),
    "bleu": (
        ["the cat sat on the mat", "the cat sat on", ""],
        ["the cat sat on a mat", "the cat sat on the mat", "x"],
        ["bleu"],
        [(1 / 6) ** 0.25, math.exp(-0.5), 0.0],
    ),
    "chrf": (["the cat", "abc", "xyz"], ["the cat", "abd", "abc"], ["chrf"], [1.0, 7 / 36, 0.0]),
    "edit_similarity": (
        ["kitten", "rain", " abc "],
        ["sitting", "shine", "abc"],
        ["edit_similarity"],
        [1 - 3 / 7, 1 - 3 / 5, 1.0],
    ),
}

MYMOD = """
def brevity_reward(prompts, responses, answers, *, max_words):
    return [float(len(r.split()) <= max_words) for r in responses]


class Scaled:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, prompts, responses, answers):
        return [self.factor * len(r) for r in responses]


def two_args(prompts, responses):
    return [0.0] * len(responses)


NOT_CALLABLE = 3


def raises_on_empty(prompts, responses, answers):
    if any(not r for r in responses):
        raise ValueError("an empty response")
    return [1.0] * len(responses)


def miscounts(prompts, responses, answers):
    return [1.0]
"""


@pytest.fixture
def mymod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``mymod`` (``MYMOD``), importable from ``tmp_path``."""
    (tmp_path / "mymod.py").write_text(MYMOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mymod", None)
    yield
    sys.modules.pop("mymod", None)


def score(reward: Reward, responses: list[str], answers: list[str | None]) -> list[float]:
    totals, _ = reward.score([f"p{i}" for i in range(len(responses))], responses, answers)
    return totals


def test_every_option_is_covered() -> None:
    options = {p.stem for p in (Path(CONFIG_DIR) / "reward").glob("*.yaml")}
    assert options - {"model", "custom"} == set(OPTIONS)


@pytest.mark.parametrize("option", list(OPTIONS))
def test_option_composes_builds_and_scores(option: str) -> None:
    responses, answers, names, expected = OPTIONS[option]
    cfg = compose_config([f"reward={option}"], validate=False)
    reward = build_reward(reward_node(cfg.reward))
    assert reward.names == names
    assert reward.accuracy_threshold == 1.0
    totals = score(reward, responses, list(answers))
    assert totals == pytest.approx(expected)
    assert reward.correct(totals) == [t >= 1.0 for t in expected]


def test_weighted_logs_each_term() -> None:
    cfg = compose_config(["reward=weighted"], validate=False)
    reward = build_reward(reward_node(cfg.reward))
    assert [(t.name, t.weight) for t in reward.terms] == [("partial", 0.9), ("format", 0.1)]
    _, per_term = reward.score(["p", "q", "r"], ["8", "80", "x"], ["8", "8", "8"])
    assert per_term == {"partial": [1.0, 0.5, 0.0], "format": [1.0, 1.0, 0.0]}


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("pkg.math_reward", "math"),
        ("pkg.RegexMatch", "regex_match"),
        ("pkg.TargetLength", "target_length"),
        ("pkg.partial_credit", "partial_credit"),
        ("pkg.brevity", "brevity"),
        ("brevity_reward", "brevity"),
    ],
)
def test_default_name(target: str, name: str) -> None:
    assert default_name(target) == name


def test_an_explicit_name_wins() -> None:
    node = {"_target_": "astrai.rewards.builtin.exact_match", "name": "em", "accuracy_threshold": 1}
    assert build_reward(node).names == ["em"]


@pytest.mark.parametrize("names", [[None, None], ["same", "same"]])
def test_repeated_term_names_are_refused(names: list[str | None]) -> None:
    terms = [
        {"_target_": "astrai.rewards.builtin.partial_credit", "name": n, "weight": 1.0}
        for n in names
    ]
    with pytest.raises(RewardConfigError, match=r"reward\.terms: names must differ"):
        build_reward({"accuracy_threshold": 1.0, "terms": terms})


def test_a_custom_function_with_a_keyword(mymod: None) -> None:
    reward = build_reward(
        {
            "_target_": "mymod.brevity_reward",
            "name": None,
            "accuracy_threshold": 1.0,
            "max_words": 3,
        }
    )
    assert reward.names == ["brevity"]
    totals = score(reward, ["one two three", "one two three four", ""], [None, None, None])
    assert totals == [1.0, 0.0, 1.0]
    assert reward.correct(totals) == [True, False, True]


def test_a_custom_class_with_constructor_arguments(mymod: None) -> None:
    reward = build_reward({"_target_": "mymod.Scaled", "accuracy_threshold": 2.0, "factor": 0.5})
    assert reward.names == ["scaled"]
    totals = score(reward, ["ab", "abcd", ""], ["x", "y", None])  # 0.5 * length
    assert totals == [1.0, 2.0, 0.0]
    assert reward.correct(totals) == [False, True, False]


def test_a_custom_function_through_hydra(mymod: None) -> None:
    cfg = compose_config(
        ["reward=custom", "reward._target_=mymod.brevity_reward", "+reward.max_words=3"],
        validate=False,
    )
    reward = build_reward(reward_node(cfg.reward))
    assert reward.names == ["brevity"]
    assert score(reward, ["a b c", "a b c d"], ["1", "2"]) == [1.0, 0.0]


def bad(**node: Any) -> dict[str, Any]:
    return {"accuracy_threshold": 1.0, **node}


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (bad(name="x"), r"reward\._target_: name the reward"),
        (bad(terms=[{"weight": 1.0}]), r"reward\.terms\[0\]\._target_: name the reward"),
        (
            bad(_target_="no_such_module_xyz.fn"),
            r"reward\._target_ 'no_such_module_xyz.fn' cannot be imported: No module named ",
        ),
        (bad(_target_="mymod.NOT_CALLABLE"), r"reward\._target_: mymod\.NOT_CALLABLE is not call"),
        (
            bad(_target_="mymod.two_args"),
            r"reward\._target_: mymod\.two_args must be callable as "
            r"fn\(prompts, responses, answers\)",
        ),
        (
            bad(_target_="mymod.brevity_reward", max_words=3, max_chars=9),
            r"reward \(mymod\.brevity_reward\): .*'max_chars'",
        ),
        (bad(_target_="mymod.Scaled", factor=1, offset=2), r"reward \(mymod\.Scaled\): .*'offset'"),
        (
            bad(_target_="mymod.brevity_reward"),  # max_words not given
            # Python 3.12 says "keyword-only argument" where 3.11 says "argument"
            r"reward\._target_: mymod\.brevity_reward .*missing a required (keyword-only )?"
            r"argument: 'max_words'",
        ),
        (
            {"_target_": "mymod.Scaled", "factor": 1, "accuracy_threshold": "high"},
            r"reward\.accuracy_threshold must be a finite number, got 'high'",
        ),
        (
            {"_target_": "mymod.Scaled", "factor": 1, "accuracy_threshold": None},
            r"reward\.accuracy_threshold must be a finite number, got None",
        ),
        (
            bad(
                terms=[
                    {"_target_": "mymod.Scaled", "name": "a", "factor": 1, "weight": 1.0},
                    {"_target_": "mymod.Scaled", "name": "b", "factor": 1, "weight": "heavy"},
                ]
            ),
            r"reward\.terms\[1\]\.weight must be a number, got 'heavy'",
        ),
        (
            bad(terms=[{"_target_": "mymod.Scaled", "factor": 1, "weight": float("nan")}]),
            r"reward\.terms\[0\]\.weight must be finite",
        ),
        (bad(terms=[]), r"reward\.terms must be a non-empty list"),
    ],
    ids=[
        "no-target",
        "no-target-in-terms",
        "unimportable",
        "not-callable",
        "signature",
        "unknown-keyword",
        "constructor-rejects",
        "missing-keyword",
        "threshold-string",
        "threshold-none",
        "weight-string",
        "weight-nan",
        "empty-terms",
    ],
)
def test_config_errors_name_the_key(mymod: None, node: dict[str, Any], message: str) -> None:
    with pytest.raises(RewardConfigError, match=message):
        build_reward(node)


def test_score_sums_weighted_terms_and_correct_uses_the_threshold() -> None:
    reward = Reward(
        [RewardTerm("partial", 0.5, partial_credit), RewardTerm("length", 2.0, TargetLength(2))],
        accuracy_threshold=1.25,
    )
    totals, per_term = reward.score(["a", "b", "c"], ["19", "190", "1"], ["19", "19", "19"])
    # partial: 1, 2/3, 1/2; length (target 2): 1, 1 - 1/2, 1 - 1/2
    assert per_term == {"partial": pytest.approx([1.0, 2 / 3, 0.5]), "length": [1.0, 0.5, 0.5]}
    # 0.5 * 1 + 2 * 1 = 2.5; 0.5 * 2/3 + 2 * 0.5 = 4/3; 0.5 * 0.5 + 2 * 0.5 = 1.25
    assert totals == pytest.approx([2.5, 4 / 3, 1.25])
    assert reward.correct(totals) == [True, True, True]  # 1.25 >= 1.25
    assert reward.correct([1.2499, 1.25, -3.0]) == [False, True, False]


def test_a_total_past_float32_is_refused() -> None:
    def huge(prompts: list[str], responses: list[str], answers: list[str | None]) -> list[float]:
        return [3e38] * len(responses)  # finite in float32 (max ~3.4028e38), but not twice

    reward = Reward([RewardTerm("a", 1.0, huge), RewardTerm("b", 1.0, huge)], 1.0)
    with pytest.raises(RewardError, match=r"reward total 6e\+38 is not a finite float32 on 'p'"):
        reward.score(["p"], ["r"], [None])


def test_an_int_past_float_range_is_a_reward_error() -> None:
    def doubling(prompts: list[str], responses: list[str], answers: list[str | None]) -> list:
        return [2 ** len(r) for r in responses]  # a Python int: float() overflows past ~2**1024

    reward = Reward([RewardTerm("doubling", 1.0, doubling)], 1.0)
    assert reward.score(["p"], ["x" * 3], [None])[0] == [8.0]
    with pytest.raises(RewardError, match=r"reward doubling returned \d+ \(not a finite float32\)"):
        reward.score(["p"], ["x" * 1100], [None])


def test_to_moves_terms_that_can_move() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.device: torch.device | None = None

        def to(self, device: torch.device) -> Recorder:
            self.device = device
            return self

        def __call__(self, prompts: list[str], responses: list[str], answers: list) -> list:
            return [0.0] * len(responses)

    recorder = Recorder()
    reward = Reward(
        [RewardTerm("model", 1.0, recorder), RewardTerm("partial", 1.0, partial_credit)], 1.0
    )
    assert reward.to(torch.device("cpu")) is reward
    assert recorder.device == torch.device("cpu")
    assert reward.terms[1].fn is partial_credit
    assert not hasattr(partial_credit, "to")


def test_validation_accepts_a_working_custom_reward(mymod: None) -> None:
    compose_config(["reward=custom", "reward._target_=mymod.brevity_reward", "+reward.max_words=3"])


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("raises_on_empty", r"reward raises_on_empty failed on prompt .*: an empty response"),
        ("miscounts", r"reward miscounts returned 1 scores for 4 responses"),
    ],
    ids=["raises", "miscounts"],
)
def test_validation_tries_the_reward_before_the_run(mymod: None, target: str, message: str) -> None:
    # validate_config scores the first 2 eval problems answered with their reference and with
    # "" (4 responses): an empty response makes raises_on_empty raise; miscounts returns 1 score
    with pytest.raises(ConfigError, match=message + r".*\(tried before the run"):
        compose_config(["reward=custom", f"reward._target_=mymod.{target}"])
