"""OpenEnv environments (``env=openenv``, issue 62) served for real on 127.0.0.1 by OpenEnv's own
server (uvicorn, a process of its own) and played through OpenEnv's client on a scripted engine:
the calculator of ``examples/openenv`` gives the native environment's episodes, rewards per turn
included; an MCP environment's tool answers the calls; a server that dies mid-episode costs the
episodes in flight, and the next ones play on a server started again.

Slow lane: each test starts a server process (openenv-core's import, ~2 s).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.scripted_engine import GREEDY, TEXT, Scripted

from astrai.envs.calculator import Calculator, parse_calc_line
from astrai.envs.openenv_env import OpenEnvEnvironment
from astrai.rollout.episodes.env_spec import turn_parser
from astrai.rollout.episodes.runner import EpisodeLimits, EpisodeText, run_episodes

pytestmark = pytest.mark.slow

CALCULATOR = Path(__file__).resolve().parents[2] / "examples" / "openenv"
SERVERS = Path(__file__).resolve().parents[1] / "openenv_servers"
CALC_TEXT = EpisodeText(TEXT.prompt_ids, TEXT.observation_ids, TEXT.decode, parse_calc_line)
ROW = {"prompt": "12*34=", "answer": "408", "text": "12*34="}


def _served_from(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server process imports its app from ``directory``."""
    path = [str(directory), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, path)))


def test_the_calculator_plays_the_native_episodes_reward_for_reward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _served_from(CALCULATOR, monkeypatch)
    rows = [ROW] * 6
    script = [["c12*34", "400", "c1+1", "c", "c", "c9*9"], ["408", "7", "408", "c", "c"],
              ["c", "c"]]  # fmt: skip
    limits = EpisodeLimits(max_turns=3)
    native = run_episodes(
        Scripted([list(t) for t in script]), [Calculator() for _ in rows], rows, CALC_TEXT,
        GREEDY, [2], limits, version=3,
    )  # fmt: skip
    envs = [OpenEnvEnvironment(app="calculator_server:app", observation_role="tool") for _ in rows]
    text = EpisodeText(TEXT.prompt_ids, TEXT.observation_ids, TEXT.decode, turn_parser("none"))
    played = run_episodes(Scripted(script), envs, rows, text, GREEDY, [2], limits, version=3)
    for theirs, mine in zip(native, played, strict=True):
        assert not mine.failed, mine.error
        assert vars(mine.tokens) == vars(theirs.tokens)  # ids, trainable, logprobs, versions
        assert (mine.done, mine.truncated) == (theirs.done, theirs.truncated)
        assert mine.turn_rewards == theirs.turn_rewards  # each turn's, the credit on the call's
    # call credit 0.5/6, then solved; a guess; "e" then 7 (no reward: None); "c" then solved
    assert played[0].turn_rewards == [0.5 / 6, 1.0] and played[2].turn_rewards == [0.125, 0.0]
    assert [e.truncated for e in played] == [False] * 4 + [True, True]


def test_an_mcp_environment_s_tool_answers_the_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    _served_from(SERVERS, monkeypatch)
    envs = [OpenEnvEnvironment(app="multiply_mcp:app", mcp=True, text_key="result")]
    (tool,) = envs[0].tools()  # its ListToolsAction's answer, as OpenAI function schemas
    assert tool["function"]["name"] == "multiply"
    assert tool["function"]["parameters"]["required"] == ["a", "b"]
    engine = Scripted([["c12*34"], ["408"]])
    (episode,) = run_episodes(engine, envs, [ROW], CALC_TEXT, GREEDY, [2], EpisodeLimits())
    assert not episode.failed, episode.error
    assert TEXT.decode(episode.tokens.ids) == "u:12*34=,a:c12*34t:408,a:408"
    # the call's reward from the tool's observation; the reply without a call ends the episode
    assert episode.turn_rewards == [0.25, 0.0] and episode.done


def test_a_server_that_dies_costs_the_episodes_in_flight_and_is_started_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _served_from(CALCULATOR, monkeypatch)
    envs = [OpenEnvEnvironment(app="calculator_server:app") for _ in range(2)]
    text = EpisodeText(TEXT.prompt_ids, TEXT.observation_ids, TEXT.decode, turn_parser("none"))
    limits = EpisodeLimits(max_turns=3, step_timeout_s=10)
    # one episode's action ends the server's process: both sessions are gone
    died = run_episodes(Scripted([["c", "die"], ["408"]]), envs, [ROW] * 2, text, GREEDY, [2],
                        limits)  # fmt: skip
    assert all(e.failed and e.cause == "raised" for e in died), [e.error for e in died]
    first = envs[0].server
    assert first is not None and first.process is not None
    # it exited (its sockets close a moment before the kernel reports the exit: waited for)
    assert first.process.wait(timeout=10) is not None
    again = run_episodes(Scripted([["c", "400"], ["408"]]), envs, [ROW] * 2, text, GREEDY, [2],
                         limits)  # fmt: skip
    assert [e.failed for e in again] == [False, False]
    assert [sum(e.turn_rewards) for e in again] == [0.5 + 1.0, 2 / 3]
    assert first.process.poll() is None  # a new server process, serving


def test_bad_input_is_one_line_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"needs one of env.url \(a running server\) or env.app"):
        OpenEnvEnvironment()
    with pytest.raises(RuntimeError, match=r"^env.app 'no_such_module:app': its server exited"):
        OpenEnvEnvironment(app="no_such_module:app")
