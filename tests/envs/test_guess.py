"""``envs.guess``: the embedded feedback task's environment, by hand (issue 50, part 7)."""

from __future__ import annotations

import pytest

from astrai.envs.guess import Guess
from astrai.envs.tool_calls import ParsedTurn


def test_feedback_then_a_find_that_pays_less_each_turn() -> None:
    env = Guess(max_number=15, turn_cost=0.15)
    assert env.reset({"text": "n7"}) == [{"role": "user", "content": "?"}]
    assert env.step(ParsedTurn("8")).observations == [{"role": "user", "content": "l"}]
    assert env.step(ParsedTurn("3")).observations == [{"role": "user", "content": "h"}]
    invalid = env.step(ParsedTurn("x"))
    assert invalid.observations == [{"role": "user", "content": "e"}] and invalid.metrics
    found = env.step(ParsedTurn("7"))
    # the 4th turn: 1 - 0.15 * 3
    assert found.done and found.reward == pytest.approx(0.55) and found.metrics == {"solved": 1.0}
    assert env.final_reward() == 0.0


def test_an_unsolved_episode_earns_its_closeness_and_bad_rows_are_refused() -> None:
    env = Guess(max_number=15, closeness=0.2)
    env.reset({"text": "n7"})
    env.step(ParsedTurn("10"))
    assert env.final_reward() == pytest.approx(0.2 * (1 - 3 / 15))
    env.reset({"text": "n7"})
    assert env.final_reward() == 0.0  # no guess at all
    found = Guess(turn_cost=0.5, min_reward=0.3)
    found.reset({"text": "n2"})
    for guess in ("1", "3", "4"):
        found.step(ParsedTurn(guess))
    assert found.step(ParsedTurn("2")).reward == 0.3  # 1 - 0.5 * 3, held at min_reward
    with pytest.raises(ValueError, match="above env.max_number 15"):
        Guess().reset({"text": "n16"})
    with pytest.raises(ValueError, match="closeness"):
        Guess(min_reward=0.1, closeness=0.2)
