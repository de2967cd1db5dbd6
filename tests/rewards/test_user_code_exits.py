"""A reward is user code (issue 30, item 2): ``sys.exit()``, ``KeyboardInterrupt`` and
``GeneratorExit`` coming out of it stop the run with one ``RewardError`` naming the reward and
the prompt (a config error before the run), never a silent exit 0; astrai's own
``StopInterrupt`` passes through. And the ``reward.timeout_s`` knob (item 3); what a call past
it does (issue 45: the rows that do not return score ``reward.timeout_score``) is
``test_worker.py``'s."""

from __future__ import annotations

import math
import sys
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
)
from astrai.rewards.build import build_reward
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


@pytest.mark.parametrize("name", list(EXITS))
def test_an_exit_from_a_reward_is_a_reward_error_naming_it_and_the_prompt(name: str) -> None:
    exc, what = EXITS[name]
    reward = Reward([RewardTerm("quitter", 1.0, _on_bad(exc))], 1.0)
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
        ("exit_on_import.quits", r"'exit_on_import.quits' cannot be imported: SystemExit: 1"),
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


def test_every_reward_option_has_the_knobs() -> None:
    """Their home: each ``conf/reward/`` option, with a comment; typed by the schema. The
    default bound is finite (60 s a call); null stays allowed."""
    for path in sorted((Path(CONFIG_DIR) / "reward").glob("*.yaml")):
        text = path.read_text().splitlines()
        for key, default in (("timeout_s", "60"), ("timeout_score", "0.0")):
            lines = [line for line in text if line.startswith(f"{key}:")]
            assert len(lines) == 1 and lines[0].split()[1] == default, path
            assert "#" in lines[0], path
    cfg = compose_config(
        ["reward=weighted", "reward.timeout_s=2.5", "reward.timeout_score=-1"], validate=False
    )
    built = build_reward(reward_node(cfg.reward))
    assert (built.timeout_s, built.timeout_score) == (2.5, -1.0)
    cfg = compose_config(["reward=math", "reward.timeout_s=null"], validate=False)
    assert build_reward(reward_node(cfg.reward)).timeout_s is None
