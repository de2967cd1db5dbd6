"""A reward is user code (issue 30, item 2): ``sys.exit()``, ``KeyboardInterrupt`` and
``GeneratorExit`` coming out of it stop the run with one ``RewardError`` naming the reward and
the prompt (a config error before the run), never a silent exit 0; astrai's own
``StopInterrupt`` passes through. And ``reward.timeout_s`` (item 3): a call that does not return
in time is one ``RewardError`` naming the reward, the timeout and the batch's first prompt."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.helpers import compose_config

from astrai.config.errors import ConfigError
from astrai.generate import Scoring, score
from astrai.paths import CONFIG_DIR
from astrai.rewards.base import (
    Reward,
    RewardConfigError,
    RewardError,
    RewardTerm,
    build_reward,
)
from astrai.rewards.config import reward_node
from astrai.tasks.base import Problem
from astrai.training.stopping import StopInterrupt

PROMPTS, RESPONSES, ANSWERS = ["p0", "p1", "p2"], ["ok", "bad", "ok"], ["a", "a", "a"]


def _on_bad(exc: Callable[[], BaseException]) -> Callable[..., list[float]]:
    """A reward that throws ``exc()`` whenever a response is ``bad``."""

    def reward(prompts: list[str], responses: list[str], answers: list) -> list[float]:
        if "bad" in responses:
            raise exc()
        return [1.0] * len(responses)

    return reward


EXITS = {
    "sys.exit()": (lambda: SystemExit(), r"called sys\.exit\(\)"),
    "sys.exit(3)": (lambda: SystemExit(3), r"called sys\.exit\(3\)"),
    "sys.exit('bye')": (lambda: SystemExit("bye"), r"called sys\.exit\('bye'\)"),
    "KeyboardInterrupt": (KeyboardInterrupt, "raised KeyboardInterrupt"),
    "GeneratorExit": (GeneratorExit, "raised GeneratorExit"),
}


@pytest.mark.parametrize("timeout_s", [None, 30.0], ids=["in-thread", "timed-thread"])
@pytest.mark.parametrize("name", list(EXITS))
def test_an_exit_from_a_reward_is_a_reward_error_naming_it_and_the_prompt(
    name: str, timeout_s: float | None
) -> None:
    exc, what = EXITS[name]
    reward = Reward([RewardTerm("quitter", 1.0, _on_bad(exc))], 1.0, timeout_s=timeout_s)
    # the batch exits; re-called row by row, p1's pair is the one that does
    with pytest.raises(RewardError, match=rf"^reward quitter {what} on prompt 'p1'$"):
        reward.score(PROMPTS, RESPONSES, ANSWERS)


def test_an_ordinary_error_keeps_its_message() -> None:
    reward = Reward([RewardTerm("div", 1.0, _on_bad(lambda: ZeroDivisionError("by zero")))], 1.0)
    with pytest.raises(RewardError, match=r"^reward div failed on prompt 'p1': by zero$"):
        reward.score(PROMPTS, RESPONSES, ANSWERS)


def test_astrai_s_own_stop_passes_through() -> None:
    """A stop signal abandoning the scoring is no reward error."""
    reward = Reward([RewardTerm("x", 1.0, _on_bad(lambda: StopInterrupt("SIGTERM")))], 1.0)
    with pytest.raises(StopInterrupt):
        reward.score(PROMPTS, RESPONSES, ANSWERS)


def test_a_generator_that_exits_while_it_yields_is_caught() -> None:
    def generator_reward(prompts: list[str], responses: list[str], answers: list) -> Iterator:
        yield 1.0
        sys.exit(0)

    reward = Reward([RewardTerm("gen", 1.0, generator_reward)], 1.0)
    with pytest.raises(RewardError, match=r"reward gen called sys\.exit\(0\) on prompt"):
        reward.score(["p0", "p1"], ["a", "b"], [None, None])


MODULE = """
import sys

if "exit_on_import" in __name__:
    sys.exit(1)


def quits(prompts, responses, answers):
    sys.exit()


class QuitsInInit:
    def __init__(self):
        raise KeyboardInterrupt

    def __call__(self, prompts, responses, answers):
        return [0.0] * len(responses)
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``quitting`` and ``exit_on_import`` (both ``MODULE``), importable from ``tmp_path``."""
    for name in ("quitting", "exit_on_import"):
        (tmp_path / f"{name}.py").write_text(MODULE)
        sys.modules.pop(name, None)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("quitting", "exit_on_import"):
        sys.modules.pop(name, None)


def test_the_pre_run_check_turns_an_exit_into_a_config_error(modules: None) -> None:
    with pytest.raises(
        ConfigError,
        match=r"reward quits called sys\.exit\(\) on prompt .*\(tried before the run",
    ):
        compose_config(["reward=custom", "reward._target_=quitting.quits"])


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("exit_on_import.quits", r"cannot import 'exit_on_import' \(SystemExit: 1\)"),
        ("quitting.QuitsInInit", r"its constructor raised KeyboardInterrupt"),
    ],
    ids=["import", "constructor"],
)
def test_building_a_reward_that_exits_is_a_config_error(
    modules: None, target: str, message: str
) -> None:
    node = {"_target_": target, "accuracy_threshold": 1.0}
    with pytest.raises(RewardConfigError, match=message):
        build_reward(node)


def test_generate_names_the_reward_in_one_error() -> None:
    """``astrai.generate --task``: the reward's exit is the ``RewardError`` its ``main`` prints
    as one line (exit 2)."""
    reward = Reward([RewardTerm("quitter", 1.0, _on_bad(SystemExit))], 1.0)
    problems = [Problem(prompt=p, answer="a", text=p) for p in PROMPTS]
    with pytest.raises(RewardError, match=r"reward quitter called sys\.exit\(\) on prompt 'p1'"):
        score(Scoring(problems, "run", reward=reward), RESPONSES)


# --- reward.timeout_s ------------------------------------------------------------------------


def _slow_on_bad(prompts: list[str], responses: list[str], answers: list) -> list[float]:
    if "bad" in responses:
        time.sleep(30)
    return [1.0] * len(responses)


def test_a_call_past_the_timeout_stops_with_one_line_naming_it() -> None:
    reward = Reward([RewardTerm("judge", 1.0, _slow_on_bad)], 1.0, timeout_s=0.1)
    start = time.monotonic()
    with pytest.raises(RewardError) as caught:
        reward.score(PROMPTS, RESPONSES, ANSWERS)
    assert time.monotonic() - start < 1.0
    assert str(caught.value) == (
        "reward judge did not return within reward.timeout_s=0.1s on a batch of 3 responses "
        "(first prompt 'p0'); the call is left running in a daemon thread"
    )


def test_calls_within_the_timeout_score_as_without_one() -> None:
    terms = [RewardTerm("judge", 0.5, _slow_on_bad), RewardTerm("other", 0.5, _slow_on_bad)]
    totals, per_term = Reward(terms, 1.0, timeout_s=5).score(["p"] * 2, ["x", "y"], [None] * 2)
    assert totals == [1.0, 1.0] and per_term == {"judge": [1.0, 1.0], "other": [1.0, 1.0]}


def test_a_failing_call_is_diagnosed_within_one_more_timeout() -> None:
    """The row-by-row search for the failing prompt gets one timeout in all, not per row."""

    def fails_then_hangs(prompts: list[str], responses: list[str], answers: list) -> list[float]:
        if len(responses) > 1:
            raise ValueError("batch")
        time.sleep(30)
        return [0.0]

    reward = Reward([RewardTerm("j", 1.0, fails_then_hangs)], 1.0, timeout_s=0.2)
    start = time.monotonic()
    with pytest.raises(RewardError, match=r"^reward j failed on prompt 'p0': batch$"):
        reward.score(PROMPTS, RESPONSES, ANSWERS)
    assert time.monotonic() - start < 1.5


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, True, "10s"])
def test_the_timeout_is_a_positive_number_of_seconds(value: object) -> None:
    node = {"_target_": "astrai.rewards.builtin.exact_match", "accuracy_threshold": 1.0}
    with pytest.raises(RewardConfigError, match=r"reward\.timeout_s must be null or a number"):
        build_reward({**node, "timeout_s": value})
    assert build_reward({**node, "timeout_s": 2}).timeout_s == 2.0
    assert build_reward({**node, "timeout_s": None}).timeout_s is None


def test_the_timeout_belongs_to_the_whole_reward_not_a_term() -> None:
    term = {"_target_": "astrai.rewards.builtin.exact_match", "weight": 1.0, "timeout_s": 5}
    with pytest.raises(RewardConfigError, match=r"reward\.terms\[0\]\.timeout_s: set it on"):
        build_reward({"accuracy_threshold": 1.0, "terms": [term]})


def test_every_reward_option_has_the_knob() -> None:
    """Its home: each ``conf/reward/`` option, with a comment; typed by the schema."""
    for path in sorted((Path(CONFIG_DIR) / "reward").glob("*.yaml")):
        lines = [line for line in path.read_text().splitlines() if line.startswith("timeout_s:")]
        assert len(lines) == 1 and "null" in lines[0] and "#" in lines[0], path
    cfg = compose_config(["reward=weighted", "reward.timeout_s=2.5"], validate=False)
    assert build_reward(reward_node(cfg.reward)).timeout_s == 2.5
