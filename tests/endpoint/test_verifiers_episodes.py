"""verifiers tasksets through the endpoint (``env=verifiers``, issue 62) on a scripted engine, one
for each of verifiers' shapes of environment: single-turn with a rubric (a raising rubric costs
its episode alone), multi-turn (the calculator taskset of ``examples/verifiers``: its episodes
are the native environment's) and tools (an MCP tool server verifiers starts per episode).

Slow lane: importing verifiers and loading a taskset take seconds, a tool server 5 s.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.scripted_engine import GREEDY, TEXT, Scripted

from astrai.endpoint.verifiers_env import VerifiersEnvironment
from astrai.envs.calculator import Calculator, parse_calc_line
from astrai.rollout.episodes.env_spec import turn_parser
from astrai.rollout.episodes.runner import EpisodeLimits, EpisodeText, run_episodes

pytestmark = pytest.mark.slow

TASKSETS = Path(__file__).resolve().parents[1] / "verifiers_tasksets"
CALCULATOR = Path(__file__).resolve().parents[2] / "examples" / "verifiers"


def _as_user(messages: list[dict]) -> list[int]:
    """An answer's ids as the scripted rendering writes a user turn: the calculator taskset's Env
    replies as the user, the native environment as a tool, and the char tokenizer's rendering
    (the conformance test's) writes neither role."""
    return TEXT.observation_ids([{**m, "role": "user"} for m in messages])


def test_a_single_turn_taskset_scores_each_reply_and_a_raising_rubric_costs_its_episode_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(TASKSETS))
    rows = [{"prompt": "2+2", "answer": "4", "text": "2+2"}] * 3
    envs = [VerifiersEnvironment("vf_qa") for _ in rows]
    episodes = run_episodes(Scripted([["4", "5", "boom"]]), envs, rows, TEXT, GREEDY, [2])
    assert [e.failed for e in episodes] == [False, False, True]
    assert [e.final_reward for e in episodes[:2]] == [1.0, 0.0]
    assert episodes[0].metrics == {"reply_chars": 1.0}
    assert TEXT.decode(episodes[0].tokens.ids).startswith("u:2+2,a:4")
    assert episodes[2].cause == "raised" and "the rubric's own bug" in str(episodes[2].error)


def test_the_calculator_taskset_plays_the_native_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(CALCULATOR))
    rows = [{"prompt": "12*34=", "answer": "408", "text": "12*34="}] * 6
    script = [["c12*34", "400", "c1+1", "c", "c", "c9*9"], ["408", "7", "408", "c", "c"],
              ["c", "c"]]  # fmt: skip
    limits = EpisodeLimits(max_turns=3)
    native_text = EpisodeText(TEXT.prompt_ids, _as_user, TEXT.decode, parse_calc_line)
    native = run_episodes(
        Scripted([list(t) for t in script]), [Calculator() for _ in rows], rows, native_text,
        GREEDY, [2], limits, version=3,
    )  # fmt: skip
    envs = [VerifiersEnvironment("calculator_taskset", verifiers_max_turns=3) for _ in rows]
    text = EpisodeText(TEXT.prompt_ids, _as_user, TEXT.decode, turn_parser("none"))
    played = run_episodes(Scripted(script), envs, rows, text, GREEDY, [2], limits, version=3)
    for theirs, mine in zip(native, played, strict=True):
        assert not mine.failed, mine.error
        assert vars(mine.tokens) == vars(theirs.tokens)  # ids, trainable, logprobs, versions
        assert (mine.done, mine.truncated) == (theirs.done, theirs.truncated)
        assert sum(mine.turn_rewards) + mine.final_reward == sum(theirs.turn_rewards)
    # call credit 0.5/6 then solved; a guess; "e" then 7; "c" then solved; out of turns twice
    assert [e.final_reward for e in played] == [0.5 / 6 + 1.0, 2 / 3, 0.5 / 4, 1.5, 0.5, 0.125]
    assert [e.metrics["solved"] for e in played] == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert [e.truncated for e in played] == [False] * 4 + [True, True]


def test_a_taskset_s_mcp_tool_server_answers_the_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TASKSETS))  # this process loads the taskset, and verifiers
    path = os.environ.get("PYTHONPATH")  # starts its tool server as `python -m vf_tools`
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TASKSETS), path])))
    rows = [{"prompt": "12*34=", "answer": "408", "text": "12*34="}] * 2
    envs = [VerifiersEnvironment("vf_tools", verifiers_max_turns=3) for _ in rows]
    # the tools offered: the tool server's, as its harness lists them
    ((tool,),) = {tuple(t["function"]["name"] for t in env.tools()) for env in envs}
    assert tool == "multiply"
    assert envs[0].tools()[0]["function"]["parameters"]["required"] == ["a", "b"]
    text = EpisodeText(TEXT.prompt_ids, TEXT.observation_ids, TEXT.decode, parse_calc_line)
    limits = EpisodeLimits(max_turns=3, step_timeout_s=60)  # a tool server starts per episode
    engine = Scripted([["c12*34", "c12*34"], ["408", "7"]])
    episodes = run_episodes(engine, envs, rows, text, GREEDY, [2], limits)
    assert [TEXT.decode(e.tokens.ids) for e in episodes] == [
        "u:12*34=,a:c12*34t:408,a:408",  # the tool server's answer, then the reply
        "u:12*34=,a:c12*34t:408,a:7",
    ]
    assert [e.final_reward for e in episodes] == [1.0, 0.0]


def test_a_bad_taskset_is_one_line_naming_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TASKSETS))
    with pytest.raises(ValueError, match=r"^env.taskset is not set"):
        VerifiersEnvironment("???")
    with pytest.raises(ValueError, match=r"^env.taskset 'no_such_taskset': taskset .* not found"):
        VerifiersEnvironment("no_such_taskset")
    with pytest.raises(ValueError, match=r"^env.taskset 'vf_needs': its NeedsData needs .'level'."):
        VerifiersEnvironment("vf_needs")
