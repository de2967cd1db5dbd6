"""``envs.calculator``: the embedded tool task's environment and its call format, through the
episode runner (issue 50, part 7)."""

from __future__ import annotations

import pytest
from tests.scripted_engine import GREEDY, TEXT, TOKENIZER, Scripted

from astrai.envs.calculator import Calculator, parse_calc_line
from astrai.envs.tool_calls import ParseError, ToolCall
from astrai.rollout.episodes.runner import EpisodeText, run_episodes

TEXT_CALC = EpisodeText(TEXT.prompt_ids, TEXT.observation_ids, TEXT.decode, parse_calc_line)


def test_the_call_format() -> None:
    assert parse_calc_line("c12*34").calls == [ToolCall("multiply", {"a": 12, "b": 34})]
    assert parse_calc_line("c").calls == [ToolCall("multiply", {})]
    assert parse_calc_line(" 408 ").content == "408" and not parse_calc_line("408").calls
    assert parse_calc_line("c12+34").errors == [ParseError("c12+34", "a call is c<int>*<int>")]


def test_a_call_then_the_answer_solves_it_and_a_guess_does_not() -> None:
    engine = Scripted([["c12*34", "400", "c1+1", "c"], ["408", "7", "408"]])
    rows = [{"text": "12*34="}] * 4
    envs = [Calculator() for _ in rows]
    tool_user, guesser, malformed, default_call = run_episodes(
        engine, envs, rows, TEXT_CALC, GREEDY, [2]
    )
    # the first call earns 0.5 x its share of "c" (1 of 6 characters), the answer 1
    assert tool_user.done and tool_user.turn_rewards == [0.5 / 6, 1.0]
    assert tool_user.metrics == {"solved": 1.0}
    observation = TOKENIZER.encode("t:=408,a:", add_bos=False)
    assert observation == tool_user.tokens.ids[-len(observation) - 4 : -4]  # then "408" + stop
    # 400 is not the product: 2 of its 3 characters match 408
    assert guesser.done and guesser.turn_rewards == [2 / 3] and guesser.metrics["solved"] == 0
    # told "e", then answered 7 (no character right)
    assert malformed.done and malformed.turn_rewards == [0.5 / 4, 0.0]
    assert malformed.metrics == {"tool_errors": 1.0, "solved": 0.0}
    # "c" calls with the question's numbers: the full call credit, then solved
    assert default_call.turn_rewards == [0.5, 1.0] and default_call.metrics["solved"] == 1.0
    assert Calculator().schemas()[0]["function"]["name"] == "multiply"


def test_without_the_tool_every_call_is_an_error_and_earns_nothing() -> None:
    engine = Scripted([["c"], ["408"]])
    (episode,) = run_episodes(
        engine, [Calculator(tool=False)], [{"text": "12*34="}], TEXT_CALC, GREEDY, [2]
    )
    assert episode.turn_rewards == [0.0, 1.0] and episode.metrics["tool_errors"] == 1.0
    assert TOKENIZER.encode("t:e,a:", add_bos=False) == episode.tokens.ids[-10:-4]
    assert Calculator(tool=False).tools() == []
    with pytest.raises(ValueError, match="call_reward"):
        Calculator(call_reward=2.0)
