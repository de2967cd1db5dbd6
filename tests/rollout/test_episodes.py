"""``rollout.episodes.runner.run_episodes``: multi-turn episodes through an engine,
token-in/token-out, with faults costing their episode only (issue 50, parts 2, 5 and 6; the trainer
does not use it yet)."""

from __future__ import annotations

import threading

import torch
from tests.episode_envs import Product
from tests.scripted_engine import GREEDY, TEXT, TOKENIZER, Scripted

from astrai.envs.base import StepResult
from astrai.envs.tool_calls import ParsedTurn
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.rollout.engines.engine import torch_engine
from astrai.rollout.episodes.runner import EpisodeLimits, cut_at_stop_string, run_episodes


class Hangs(Product):
    def step(self, turn: ParsedTurn) -> StepResult:
        threading.Event().wait(60)
        raise AssertionError


class Raises(Product):
    def step(self, turn: ParsedTurn) -> StepResult:
        raise KeyError("missing")


class Floods(Product):
    def step(self, turn: ParsedTurn) -> StepResult:
        return StepResult([{"role": "tool", "content": "9" * 1_000_000}])


class Talks(Product):
    def step(self, turn: ParsedTurn) -> StepResult:
        return StepResult([{"role": "tool", "content": "9" * 200}])


class AsyncProduct(Product):
    async def step(self, turn: ParsedTurn) -> StepResult:  # type: ignore[override]
        return Product.step(self, turn)


def test_turns_continue_from_the_episode_s_own_tokens() -> None:
    engine = Scripted([["12", "7"], ["408", "21"]])
    rows = [{"a": 12, "b": 34}, {"a": 3, "b": 7}]
    episodes = run_episodes(engine, [Product(), Product()], rows, TEXT, GREEDY, [2])
    first, second = episodes
    assert first.done and second.done and first.turn_rewards == [0.0, 1.0]
    # the second turn's prompt is the first's, the sampled tokens, then the observation
    opening = TOKENIZER.encode("u:12*34=?,a:")
    turn1 = TOKENIZER.encode("12", add_bos=False) + [2]
    observation = TOKENIZER.encode("t:no,a:", add_bos=False)
    assert engine.prompts[0][0] == opening
    assert engine.prompts[1][0] == opening + turn1 + observation
    assert first.tokens.ids == opening + turn1 + observation + TOKENIZER.encode(
        "408", add_bos=False
    ) + [2]
    trained = [i for i, t in zip(first.tokens.ids, first.tokens.trainable, strict=False) if t]
    assert trained == turn1 + TOKENIZER.encode("408", add_bos=False) + [2]
    assert (
        first.tokens.turns == [0] * len(opening) + [1] * (len(turn1) + len(observation)) + [2] * 4
    )


def test_a_hung_raising_or_flooding_environment_costs_its_episode_only() -> None:
    engine = Scripted([["1", "1", "1", "1", "1"], ["1", "21"]])
    rows = [{"a": 3, "b": 7}] * 5
    limits = EpisodeLimits(max_turns=2, max_observation_tokens=10, step_timeout_s=0.2)
    envs = [Hangs(), Raises(), Floods(), Talks(), Product()]
    hung, raised, flooded, talks, fine = run_episodes(engine, envs, rows, TEXT, GREEDY, [2], limits)
    assert hung.failed and hung.error == "step: timed out after 0.2 s" and hung.timeouts == 1
    assert hung.cause == "timeout" and raised.cause == "raised" and flooded.cause == "flood"
    assert raised.failed and raised.error == "step: KeyError: 'missing'" and raised.timeouts == 0
    # 1 MB of text is a fault (max_observation_chars), not an observation
    assert flooded.failed and flooded.error == (
        "an observation of 1000000 characters (env.max_observation_chars 100000)"
    )
    # two turns, the first answered with 200 characters cut to their last 10 tokens (the next
    # turn's opening kept); then out of turns: no observation after the last turn
    opening = len(TOKENIZER.encode("u:3*7=?,a:"))
    assert not talks.failed and talks.truncated
    assert talks.tokens.trainable.count(False) == opening + 10
    assert fine.done and fine.turn_rewards == [0.0, 1.0]
    assert engine.prompts[1] and len(engine.prompts[1]) == 2  # only the live ones sampled again


def test_an_async_step_is_awaited_and_a_slow_episode_runs_out_of_its_time() -> None:
    engine = Scripted([["1"], ["21"]])
    (episode,) = run_episodes(
        engine, [AsyncProduct()], [{"a": 3, "b": 7}], TEXT, GREEDY, [2], EpisodeLimits()
    )
    assert episode.done and episode.turn_rewards == [0.0, 1.0] and episode.steps == 2

    class Slow(Product):
        def step(self, turn: ParsedTurn) -> StepResult:
            threading.Event().wait(0.15)
            return StepResult([{"role": "tool", "content": "no"}])

    limits = EpisodeLimits(max_turns=4, step_timeout_s=1.0, episode_timeout_s=0.25)
    engine = Scripted([["1"], ["1"], ["1"]])
    (slow,) = run_episodes(engine, [Slow()], [{"a": 3, "b": 7}], TEXT, GREEDY, [2], limits)
    # 0.15 s, then what is left of 0.25 s: the second step times out
    assert slow.failed and slow.timeouts == 1 and slow.steps == 2


def test_a_turn_ends_at_its_first_stop_string() -> None:
    ids = TOKENIZER.encode("ab.cd.", add_bos=False)
    assert cut_at_stop_string(ids, TOKENIZER.decode, ["."]) == 3
    assert cut_at_stop_string(ids, TOKENIZER.decode, ["cd."]) == 6
    assert cut_at_stop_string(ids, TOKENIZER.decode, []) == 6


def test_the_torch_engine_continues_an_episode_as_it_samples_its_prefix() -> None:
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig(initializer_range=0.2)).eval()
    engine = torch_engine(policy, TOKENIZER)

    class Never(Product):  # always another turn, whatever the random policy answers
        def step(self, turn: ParsedTurn) -> StepResult:
            return StepResult([{"role": "tool", "content": "no"}])

    (episode,) = run_episodes(
        engine, [Never()], [{"a": 2, "b": 2}], TEXT, GREEDY, [2], EpisodeLimits(max_turns=2)
    )
    turn2 = [
        i
        for i, (t, turn) in enumerate(
            zip(episode.tokens.trainable, episode.tokens.turns, strict=False)
        )
        if t and turn == 2
    ]
    assert turn2 and episode.truncated
    prefix = torch.tensor([episode.tokens.ids[: turn2[0]]])
    again = engine.sample(prefix, torch.ones_like(prefix, dtype=torch.bool), 1, GREEDY, [2])
    kept = again.response_ids[0][again.response_mask[0]].tolist()
    assert kept == [episode.tokens.ids[i] for i in turn2]  # greedy: the same continuation
