"""``envs.calculator``: the embedded tool task's environment and its call format, through the
episode runner (issue 50, part 7; the task and its learning runs are not built yet)."""

from __future__ import annotations

from tests.scripted_engine import GREEDY, TEXT, TOKENIZER, Scripted

from astrai.envs.calculator import Calculator, parse_calc_line
from astrai.envs.tool_calls import ParseError, ToolCall
from astrai.rollout.episodes import EpisodeText, run_episodes


def test_the_call_format() -> None:
    assert parse_calc_line("c12*34").calls == [ToolCall("multiply", {"a": 12, "b": 34})]
    assert parse_calc_line(" 408 ").content == "408" and not parse_calc_line("408").calls
    assert parse_calc_line("c12+34").errors == [ParseError("c12+34", "a call is c<int>*<int>")]


def test_a_call_then_the_answer_solves_it_and_a_guess_does_not() -> None:
    text = EpisodeText(TEXT.prompt_ids, TEXT.observation_ids, TEXT.decode, parse_calc_line)
    engine = Scripted([["c12*34", "400", "c1+1"], ["408", "7"]])
    rows = [{"a": 12, "b": 34}] * 3
    tool_user, guesser, malformed = run_episodes(
        engine, [Calculator(), Calculator(), Calculator()], rows, text, GREEDY, [2]
    )
    assert tool_user.done and tool_user.turn_rewards == [0.0, 1.0]
    observation = TOKENIZER.encode("t:=408,a:", add_bos=False)
    assert observation == tool_user.tokens.ids[-len(observation) - 4 : -4]  # then "408" + stop
    assert guesser.done and guesser.turn_rewards == [0.0]  # 400 is not the product
    assert malformed.done and malformed.turn_rewards == [0.0, 0.0]  # told, then answered 7
    assert Calculator().schemas()[0]["function"]["name"] == "multiply"
