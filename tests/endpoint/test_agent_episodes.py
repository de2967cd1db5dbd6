"""Black-box agents through the endpoint (``endpoint.agent``, issue 62), on a scripted engine: an
agent that plays the calculator as the native environment does gets its tokens and rewards; the
client's own record of its calls assembles to the episode's tokens; an edited history, a second
call in flight, other tools, a hang, a raise and an agent that never calls the model each cost
their episode alone."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from tests import endpoint_agents
from tests.scripted_engine import GREEDY, TEXT, Scripted

from astrai.endpoint.agent import AgentEnvironment
from astrai.endpoint.server import endpoint_server
from astrai.endpoint.trace import TraceBreak, TracedCall, assemble, traced_call
from astrai.envs.calculator import Calculator, parse_calc_line
from astrai.rollout.episodes.env_spec import env_spec
from astrai.rollout.episodes.runner import EnvSlots, EpisodeLimits, EpisodeText, run_episodes

AGENT_ENV = "astrai.endpoint.agent.AgentEnvironment"
AGENT_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent"
TEXT_CALC = EpisodeText(TEXT.prompt_ids, TEXT.observation_ids, TEXT.decode, parse_calc_line)
CALC_SCRIPT = [["c12*34", "400", "c1+1", "c", "c", "c9*9"], ["408", "7", "408", "c", "c"],
               ["c", "c"]]  # fmt: skip


def _agents(agent: str, n: int, **kwargs) -> list[AgentEnvironment]:  # noqa: ANN003
    return [AgentEnvironment(f"tests.endpoint_agents.{agent}", **kwargs) for _ in range(n)]


def test_the_calculator_agent_plays_the_native_episodes_token_for_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(AGENT_EXAMPLE))
    rows = [{"text": "12*34="}] * 6
    limits = EpisodeLimits(max_turns=3)
    played = {}
    native = [Calculator() for _ in rows]
    agent = [AgentEnvironment("calculator_agent.play") for _ in rows]
    for name, envs in (("native", native), ("agent", agent)):
        engine = Scripted([list(texts) for texts in CALC_SCRIPT])
        played[name] = run_episodes(engine, envs, rows, TEXT_CALC, GREEDY, [2], limits, version=3)
    for native, agent in zip(played["native"], played["agent"], strict=True):
        assert not agent.failed, agent.error
        assert vars(agent.tokens) == vars(
            native.tokens
        )  # ids, trainable, logprobs, versions, turns
        assert (agent.done, agent.truncated) == (native.done, native.truncated)
        # the agent's reward is its episode's, on the last sampled token: the same sum
        assert sum(agent.turn_rewards) + agent.final_reward == sum(native.turn_rewards)
        assert agent.metrics.get("solved") == native.metrics.get("solved")  # the answer's
    # call credit 0.5/6 then solved; a guess; "e" then 7; "c" then solved; out of turns twice
    totals = [sum(e.turn_rewards) for e in played["native"]]
    assert totals == [0.5 / 6 + 1.0, 2 / 3, 0.5 / 4, 1.5, 0.5, 0.5 * 1 / 4]
    assert [e.truncated for e in played["agent"]] == [False] * 4 + [True, True]


def test_the_client_s_record_of_its_calls_assembles_to_the_episode_s_tokens() -> None:
    rows = [{"text": "hello"}, {"text": "world"}]
    engine = Scripted([["ok", "no"], ["fine", "yes"]])
    episodes = run_episodes(engine, _agents("records", 2), rows, TEXT, GREEDY, [2], version=7)
    for row, episode in zip(rows, episodes, strict=True):
        completions = endpoint_agents.TRACE.pop(row["text"])
        assert len(completions) == 2 and not episode.failed
        first = completions[0]
        choice = first["choices"][0]
        assert (
            choice["finish_reason"] == "stop" and first["system_fingerprint"] == "astrai-plain-v7"
        )
        assert choice["logprobs"]["content"][0]["token"] == f"token_id:{choice['token_ids'][0]}"
        assert first["usage"]["completion_tokens"] == len(choice["token_ids"])
        ledger = assemble([traced_call(c) for c in completions])
        assert vars(ledger) == vars(episode.tokens)
    assert episodes[0].final_reward == len("fine")


def test_a_trace_that_does_not_extend_is_refused_by_the_assembly() -> None:
    first = TracedCall([1, 2], [3], [-0.5])
    assert assemble([first, TracedCall([1, 2, 3, 4], [5], [-0.1])]).ids == [1, 2, 3, 4, 5]
    with pytest.raises(TraceBreak, match="call 2's prompt does not extend the trace .from token 2"):
        assemble([first, TracedCall([1, 2, 9, 4], [5], [-0.1])])


@pytest.mark.parametrize(
    ("agent", "cause", "error"),
    [
        ("edits_history", "trace_break", "call 2 does not extend the trace: its message 1"),
        # the second call while the first is unanswered, or (when the first was answered before
        # the second arrived) a second call whose history lacks the first's answer
        ("two_at_once", "trace_break", "a second call while one was unanswered|does not extend"),
        ("wrong_tools", "trace_break", "the first call offers 1 tools, not env.tools' 0"),
        ("never_calls", "raised", "AgentError: the agent returned without calling the model"),
        ("raises_after_a_call", "raised", "RuntimeError: the agent's own bug"),
        # 5 s of its timeout: the slow lane's (a hang in a worker process, killed, below)
        pytest.param("hangs", "timeout", "reset", marks=pytest.mark.slow),
    ],
)
def test_an_agent_that_breaks_the_protocol_costs_its_episode_alone(
    agent: str, cause: str, error: str
) -> None:
    # the good agent played once, unlimited, first: a process's first openai call imports for
    # a second or more on a loaded machine (the slow lane runs "hangs" alone in a worker), and
    # that is not the time limit under test
    run_episodes(Scripted([["ok"], ["ok"]]), _agents("records", 1), [{"text": "warm"}], TEXT,
                 GREEDY, [2])  # fmt: skip
    endpoint_agents.TRACE.pop("warm", None)
    rows = [{"text": "hi"}, {"text": "hi"}]
    envs = [*_agents(agent, 1), *_agents("records", 1)]
    engine = Scripted([["ok", "ok"], ["ok", "ok"]])
    # the hang's limit leaves a loaded machine's good episode seconds of room
    limits = EpisodeLimits(step_timeout_s=5.0 if agent == "hangs" else 1.0, max_turns=3)
    broken, good = run_episodes(engine, envs, rows, TEXT, GREEDY, [2], limits)
    endpoint_agents.TRACE.pop("hi", None)
    assert broken.failed and broken.cause == cause and re.search(error, str(broken.error))
    assert not good.failed and good.final_reward == 2.0


def test_an_async_agent_returns_its_reward_and_metrics_and_a_call_past_the_limit_is_refused() -> (
    None
):
    engine = Scripted([["ok", "ok"], ["fine"]])
    async_agent, limited = run_episodes(
        engine,
        [*_agents("answers_async", 1), *_agents("records", 1)],
        [{"text": "a"}, {"text": "b"}],
        TEXT,
        GREEDY,
        [2],
        EpisodeLimits(max_turns=1),
    )
    endpoint_agents.TRACE.pop("b")
    assert async_agent.done and async_agent.final_reward == 1.0
    assert async_agent.metrics == {"chars": 2.0}
    # max_turns 1: its second call is answered 410, it raises, its reward is 0
    assert limited.truncated and not limited.failed and limited.final_reward == 0.0


def test_the_endpoint_answers_only_the_keys_of_open_sessions() -> None:
    server = endpoint_server()
    session, key = server.open_session()
    models = httpx.get(f"{server.url}/models", headers={"Authorization": f"Bearer {key}"})
    assert models.status_code == 200 and models.json()["data"][0]["object"] == "model"
    token = {"Authorization": f"Bearer {server.token}"}  # the token alone: a session named too
    for header, body in (({}, {}), ({"Authorization": "Bearer x.y"}, {}),
                         ({"Authorization": f"Bearer {key}0"}, {}), (token, {}),
                         (token, {"model": "astrai@nosuch"})):  # fmt: skip
        refused = httpx.post(f"{server.url}/chat/completions", json=body, headers=header)
        assert refused.status_code == 401, (header, body)
    server.close_session(session, "over")
    after = httpx.post(f"{server.url}/chat/completions", json={},
                       headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    assert after.status_code == 401 and server.url.startswith("http://127.0.0.1:")


@pytest.mark.slow  # ~5 s: worker processes start the endpoint of their own (fastapi, openai)
def test_agents_in_worker_processes_serve_their_own_endpoints_and_a_hang_is_killed() -> None:
    common = {"_target_": AGENT_ENV, "workers": "process", "parser": "none"}
    spec = env_spec({**common, "agent": "tests.endpoint_agents.records", "step_timeout_s": 20})
    hung = env_spec({**common, "agent": "tests.endpoint_agents.hangs", "step_timeout_s": 2})
    assert spec is not None and hung is not None
    rows = [{"text": "x"}, {"text": "y"}]
    for env, texts in ((spec, [["ok", "no"], ["fine", "yes"]]), (hung, [])):
        slots = EnvSlots.of_class(env.cls, env.kwargs, 2, "process", env.target)
        episodes = run_episodes(Scripted(texts), slots, rows, TEXT, GREEDY, [2], env.limits)
        if env is spec:
            assert [e.final_reward for e in episodes] == [4.0, 3.0]
            assert not any(e.failed for e in episodes)
        else:  # each hung agent's worker killed at its timeout: no worker left behind
            assert all(e.cause == "timeout" for e in episodes)
            assert slots.pool.live_abandoned() == 0


def test_a_missing_agent_or_arguments_it_does_not_take_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="env.agent is not set: name your agent"):
        AgentEnvironment("???")
    with pytest.raises(ValueError, match="got an unexpected keyword argument 'bogus'"):
        AgentEnvironment("tests.endpoint_agents.records", agent_args={"bogus": 1})
