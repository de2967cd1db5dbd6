"""What an environment or parser returns is checked at the door, every call into user code runs
within the limits, and limits bound (issue 58, findings 2, 3, 7, 8 and 9): each fault fails its
episode with a cause, the first of each cause is logged once, and the others play on. Each test
here failed on the runner before issue 58 (a NaN reward trained, a ``None`` step failed with no
reason, a raising ``reset`` crashed the batch, an ``async def reset`` was not awaited...)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from tests.episode_envs import Product
from tests.scripted_engine import GREEDY, TEXT, TOKENIZER, Scripted

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.episode_tokens import EpisodeTokens
from astrai.envs.tool_calls import ParsedTurn
from astrai.rollout.episodes import calls as episode_calls
from astrai.rollout.episodes.calls import EnvSlots, Episode, call_all
from astrai.rollout.episodes.rollout import episode_reward, episode_stats, episodes_rollout
from astrai.rollout.episodes.runner import (
    EpisodeLimits,
    EpisodeText,
    cut_at_stop_string,
    run_episodes,
)
from astrai.tasks.base import Problem

ROW = {"a": 3, "b": 7}


class Returns(Product):
    """Its first step returns ``value`` (whatever it is)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def step(self, turn: ParsedTurn) -> StepResult:
        return self.value  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def _fresh_failure_log() -> None:
    episode_calls._told.clear()  # noqa: SLF001 (each test sees its own first failures)


def _play(envs: list[Environment], script: list[list[str]], **limits: object) -> list[Episode]:
    limit = EpisodeLimits(**{"step_timeout_s": 2.0, **limits})  # type: ignore[arg-type]
    return run_episodes(Scripted(script), envs, [ROW] * len(envs), TEXT, GREEDY, [2], limit)


BAD_STEPS = {
    "none": (None, "step() must return a StepResult, got NoneType None"),
    "tuple": (("no", 0.0), "step() must return a StepResult, got tuple"),
    "text": (StepResult("=1"), "StepResult.observations: expected a list of messages, got str"),  # type: ignore[arg-type]
    "content-none": (StepResult([{"role": "tool", "content": None}]), "content must be text"),
    "bytes": (StepResult([{"role": "tool", "content": b"no"}]), "content must be text"),
    "role": (StepResult([{"role": "robot", "content": "no"}]), "has role 'robot'"),
    "nan": (StepResult(reward=float("nan")), "StepResult.reward must be finite, got nan"),
    "inf": (StepResult(reward=float("inf"), done=True), "StepResult.reward must be finite"),
    "string-reward": (StepResult(reward="1"), "StepResult.reward must be a number"),  # type: ignore[arg-type]
    "metric": (StepResult(metrics={"x": "a"}), "StepResult.metrics['x'] must be a number"),  # type: ignore[dict-item]
    "nan-metric": (StepResult(metrics={"x": float("nan")}), "metrics['x'] must be finite"),
}


@pytest.mark.parametrize("case", sorted(BAD_STEPS))
def test_a_step_s_bad_value_fails_its_episode_naming_why(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    value, why = BAD_STEPS[case]
    with caplog.at_level(logging.WARNING):
        bad, fine = _play([Returns(value), Product()], [["20", "21"], ["21"]])
    assert bad.failed and bad.cause == "invalid" and why in (bad.error or "")
    assert episode_reward(bad) == 0.0  # a NaN never reaches the group mean
    assert fine.done and not fine.failed and episode_reward(fine) == 1.0
    stats = episode_stats(bad, 1.0)
    assert stats["failed"] == 1.0 and stats["failed_invalid"] == 1.0 and stats["failed_raised"] == 0
    [line] = [r.getMessage() for r in caplog.records if "an episode failed" in r.getMessage()]
    assert "Returns" in line and "(invalid)" in line and why in line


def test_the_parts_list_form_is_text() -> None:
    content = [{"type": "text", "text": "n"}, {"type": "text", "text": "o"}]
    parts = StepResult([{"role": "tool", "content": content}])
    (episode,) = _play([Returns(parts)], [["20"], ["21"]], max_turns=2)
    assert not episode.failed
    observation = TOKENIZER.encode("t:no,a:", add_bos=False)
    assert episode.tokens.ids[-len(observation) - 3 : -3] == observation


def test_the_first_failure_of_each_cause_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    envs: list[Environment] = [
        Returns(None),
        Returns(None),
        Returns(StepResult(reward=float("nan"))),
    ]
    with caplog.at_level(logging.WARNING):
        episodes = _play(envs, [["1", "2", "3"]])
    assert all(e.cause == "invalid" for e in episodes)
    assert sum("an episode failed" in r.getMessage() for r in caplog.records) == 1


class ResetRaises(Product):
    def reset(self, row: dict) -> list[Message]:
        raise ConnectionError("the sandbox is down")


class ResetHangs(Product):
    def reset(self, row: dict) -> list[Message]:
        threading.Event().wait(30)
        raise AssertionError


class ResetReturnsText(Product):
    def reset(self, row: dict) -> list[Message]:
        return "3*7=?"  # type: ignore[return-value]


class AsyncReset(Product):
    async def reset(self, row: dict) -> list[Message]:  # type: ignore[override]
        await asyncio.sleep(0)
        return Product.reset(self, row)


def test_a_reset_that_raises_hangs_or_returns_text_costs_its_episode_only() -> None:
    envs = [ResetRaises(), ResetHangs(), ResetReturnsText(), AsyncReset()]
    start = time.monotonic()
    raised, hung, text, awaited = _play(envs, [["21"]], step_timeout_s=0.5)
    assert time.monotonic() - start < 10
    assert raised.cause == "raised" and "ConnectionError: the sandbox is down" in raised.error
    assert hung.cause == "timeout" and hung.timeouts == 1
    assert text.cause == "invalid" and "reset(): expected a list of messages, got str" in text.error
    assert awaited.done and episode_reward(awaited) == 1.0  # an async reset is awaited
    assert [e.tokens.ids for e in (raised, hung, text)] == [[], [], []]


def test_a_user_parser_s_bad_value_fails_its_episode() -> None:
    for returned, why in [
        ("21", "must return a ParsedTurn, got str"),
        (None, "must return a ParsedTurn, got NoneType"),
        (ParsedTurn(content=123), "ParsedTurn.content must be text, got int"),  # type: ignore[arg-type]
        (ParsedTurn("x", calls=["c"]), "ParsedTurn.calls must be a list of ToolCall"),  # type: ignore[list-item]
    ]:
        parse = lambda text, returned=returned: returned  # noqa: E731
        text = EpisodeText(TEXT.prompt_ids, TEXT.observation_ids, TEXT.decode, parse)
        limits = EpisodeLimits(step_timeout_s=2.0)
        (episode,) = run_episodes(Scripted([["21"]]), [Product()], [ROW], text, GREEDY, [2], limits)
        assert episode.cause == "invalid" and why in (episode.error or ""), returned


def test_a_bad_final_reward_fails_its_episode() -> None:
    class NanFinal(Product):
        def final_reward(self) -> float:
            return float("nan")

    (episode,) = _play([NanFinal()], [["21"]])
    assert episode.cause == "invalid" and "final_reward() must be finite" in (episode.error or "")


def test_the_stop_string_search_decodes_log_n_prefixes() -> None:
    calls = []

    def decode(ids: list[int]) -> str:
        calls.append(len(ids))
        return TOKENIZER.decode(ids)

    ids = TOKENIZER.encode("a" * 700 + "=x." + "b" * 321, add_bos=False)  # 1,024 tokens
    assert cut_at_stop_string(ids, decode, ["=x."]) == 703
    assert len(calls) <= 12  # 1 + ceil(log2 1024); one decode per prefix took 703
    calls.clear()
    assert cut_at_stop_string(ids, decode, ["=y."]) == 1024 and calls == [1024]
    # the first stop string, wherever it ends, and a stop at the very first token
    assert cut_at_stop_string(TOKENIZER.encode("ab.cd.e", add_bos=False), decode, ["."]) == 3
    assert cut_at_stop_string(TOKENIZER.encode(".a", add_bos=False), decode, ["."]) == 1


def test_the_last_turn_keeps_what_is_left_of_the_episode_s_tokens() -> None:
    opening = len(TOKENIZER.encode("u:3*7=?,a:"))
    (episode,) = _play([Product()], [["1234567"]], max_episode_tokens=opening + 4)
    assert len(episode.tokens.ids) == opening + 4  # 4 of the 8 sampled, no observation after
    assert episode.tokens.trainable[opening:] == [True] * 4
    assert episode.truncated and episode.steps == 1 and episode.turn_rewards == [0.0]


def test_no_observation_follows_the_last_turn() -> None:
    (episode,) = _play([Product()], [["20"]], max_turns=1)
    opening = TOKENIZER.encode("u:3*7=?,a:")
    assert episode.tokens.ids == opening + TOKENIZER.encode("20", add_bos=False) + [2]
    assert episode.truncated and episode.turn_rewards == [0.0]


def test_no_call_starts_for_an_episode_with_no_time_left() -> None:
    started = []

    class Counts(Product):
        def step(self, turn: ParsedTurn) -> StepResult:
            started.append(1)
            return super().step(turn)

    slots = EnvSlots.of_instances([Counts()])
    try:
        episode = Episode(EpisodeTokens(), env_s=0.5)
        values = call_all(slots, [episode], [(0, "step", (ParsedTurn("1"),))], 5.0, 0.5, 1)
    finally:
        slots.close()
    assert values == {} and started == []
    assert episode.cause == "timeout" and "no time left" in (episode.error or "")


class RandomOpening(Product):
    count = 0

    def reset(self, row: dict) -> list[Message]:
        RandomOpening.count += 1
        self.answer = "21"
        return [{"role": "user", "content": f"seed {RandomOpening.count}: 3*7=?"}]


def test_a_group_opened_differently_fails_the_group_not_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    envs: list[Environment] = [RandomOpening(), RandomOpening(), Product(), Product()]
    rows = [ROW, ROW, {"a": 2, "b": 2}, {"a": 2, "b": 2}]
    limits = EpisodeLimits(step_timeout_s=2.0)
    engine = Scripted([["21", "21", "4", "4"]])
    episodes = run_episodes(engine, envs, rows, TEXT, GREEDY, [2], limits)
    problems = [Problem("3*7=?", "21", "3*7=?"), Problem("2*2=?", "4", "2*2=?")]
    with caplog.at_level(logging.WARNING):
        rollout = episodes_rollout(episodes, problems, 0, TOKENIZER.decode, 0, 1.0, False, "R")
    assert [e.cause for e in episodes] == ["opening", "opening", None, None]
    assert rollout.rewards.tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert rollout.loss_mask is not None and not rollout.loss_mask[0].any()
    assert rollout.loss_mask[1].any()
    assert any("opened the episodes of the task row" in r.getMessage() for r in caplog.records)


def test_an_async_environment_keeps_its_loop_across_the_episode_in_a_worker() -> None:
    """``tests.episode_envs.AsyncTwoTurns`` makes an ``asyncio.Lock`` in ``reset`` and takes it
    in each step: one event loop per episode (before: a fresh ``asyncio.run`` per step, and
    the second step failed "attached to a different loop")."""
    from tests.episode_envs import AsyncTwoTurns

    slots = EnvSlots.of_class(AsyncTwoTurns, {}, 2, "process", "AsyncTwoTurns")
    limits = EpisodeLimits(max_turns=3, step_timeout_s=10.0)
    rows = [{"text": "1+1="}, {"text": "2+2="}]
    engine = Scripted([["a", "b"], ["c", "d"]])
    episodes = run_episodes(engine, slots, rows, TEXT, GREEDY, [2], limits)
    assert [(e.done, e.failed, e.steps) for e in episodes] == [(True, False, 2)] * 2
    assert all(e.metrics == {"parity": 1.0} for e in episodes)


def test_an_over_long_answer_is_cut_by_characters_before_it_is_encoded() -> None:
    encoded: list[int] = []

    def observation_ids(messages: list[Message]) -> list[int]:
        text = "".join(m["content"] for m in messages)
        encoded.append(len(text))
        return TEXT.observation_ids(messages)

    text = EpisodeText(TEXT.prompt_ids, observation_ids, TEXT.decode, TEXT.parse, max_token_chars=1)

    class Talks(Product):
        def step(self, turn: ParsedTurn) -> StepResult:
            return StepResult([{"role": "tool", "content": "9" * 100_000}])

    limits = EpisodeLimits(max_turns=2, max_observation_tokens=10, step_timeout_s=2.0)
    run_episodes(Scripted([["1"], ["2"]]), [Talks()], [ROW], text, GREEDY, [2], limits)
    # 10 tokens of at most 1 character each: no text past 10 characters is ever encoded
    assert encoded and max(encoded) <= 10
