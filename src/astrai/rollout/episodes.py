"""Multi-turn episodes through an engine (issue 50, part 6): what the trainer's rollouts and
evaluations under ``env=...`` run (``rollout.episode_rollout``).

``run_episodes`` drives a batch of environments turn by turn: every live episode's tokens so far
are the prompt of its next turn (the engine continues from the ids as given:
``Engine.supports_prefix_continuation``), the sampled ids are appended as trainable, the turn's
text is read for tool calls (``envs.tool_calls``), the environments answer within time limits
(``envs.tool_limits.run_limited``; at most ``max_concurrency`` steps at once, an ``async def
step`` run to completion in its worker), and their observation tokens are appended as context,
their text cut to ``max_observation_tokens`` (``rollout.observation_limit``). An episode ends
when its environment says so, at ``max_turns``, or when its tokens reach
``max_episode_tokens`` (truncated). A step that raises,
times out (``step_timeout_s``, or what is left of ``episode_timeout_s``), returns no
``StepResult`` or answers with more than ``max_observation_chars`` characters ends its episode
as ``failed``: the trainer masks it out of the update and counts it (``env/*``), never stops.

Stop strings (Hermes' ``</tool_call>``) are not engine stop ids: a turn is cut after the first
stop string its text holds, and the tokens sampled after it are dropped (never trained on, never
seen by the environment). The kept tokens are exactly what the engine sampled.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.episode_tokens import EpisodeTokens
from astrai.envs.tool_calls import ParsedTurn
from astrai.envs.tool_limits import Limited, run_all_limited
from astrai.rollout.engine import Engine
from astrai.rollout.observation_limit import fitted_observation
from astrai.rollout.sampler import SamplingConfig


@dataclass(frozen=True)
class EpisodeLimits:
    """``max_turns``: assistant turns an episode may take; ``max_episode_tokens``: its tokens
    in all; ``max_observation_tokens``: one answer's tokens (its contents cut on
    ``observation_truncation_side``, ``left`` or ``right``: ``rollout.observation_limit``);
    ``max_observation_chars``: one answer's characters before it is a fault (a flooding
    tool); ``step_timeout_s``: one environment step's seconds;
    ``episode_timeout_s``: an episode's environment seconds in all; ``max_concurrency``:
    environment steps run at once."""

    max_turns: int = 4
    max_episode_tokens: int = 1024
    max_observation_tokens: int = 256
    observation_truncation_side: str = "left"
    max_observation_chars: int = 100_000
    step_timeout_s: float = 10.0
    episode_timeout_s: float = 60.0
    max_concurrency: int = 16


@dataclass
class Episode:
    """One episode's outcome: its ``tokens``, rewards per turn, the final reward, and how it
    ended (``done``, ``truncated``, or ``failed`` with the ``error``); counts for ``env/*``
    and the environment's own ``metrics`` summed over its steps."""

    tokens: EpisodeTokens
    turn_rewards: list[float] = field(default_factory=list)
    final_reward: float = 0.0
    done: bool = False
    truncated: bool = False
    failed: bool = False
    error: str | None = None
    tool_calls: int = 0
    parse_errors: int = 0
    timeouts: int = 0
    steps: int = 0
    step_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return not (self.done or self.truncated or self.failed)


@dataclass(frozen=True)
class EpisodeText:
    """How an episode's messages become tokens and its tokens text: ``prompt_ids`` (the opening
    messages with the generation prompt), ``observation_ids`` (the tokens after a sampled end
    token: ``envs.episode_tokens.ObservationRenderer.ids``), ``decode`` and ``parse`` (a tool-call
    format's parser), and the format's ``stop_strings``."""

    prompt_ids: Callable[[Sequence[Message]], list[int]]
    observation_ids: Callable[[Sequence[Message]], list[int]]
    decode: Callable[[list[int]], str]
    parse: Callable[[str], ParsedTurn]
    stop_strings: Sequence[str] = ()


def cut_at_stop_string(
    ids: list[int], decode: Callable[[list[int]], str], stops: Sequence[str]
) -> int:
    """How many of ``ids`` a turn keeps: up to the first token whose text completes a stop
    string, all of them when none does."""
    if not stops:
        return len(ids)
    for end in range(1, len(ids) + 1):
        text = decode(ids[:end])
        if any(stop in text for stop in stops):
            return end
    return len(ids)


def _left_padded(
    rows: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` left-padded to the longest, on ``device``: ids and mask ``[N, W]``."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(rows), width, dtype=torch.bool, device=device)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long, device=device)
        mask[i, width - len(row) :] = True
    return ids, mask


def run_episodes(
    engine: Engine,
    envs: Sequence[Environment],
    rows: Sequence[dict],
    text: EpisodeText,
    sampling: SamplingConfig,
    stop_ids: Sequence[int],
    limits: EpisodeLimits = EpisodeLimits(),
    generator: torch.Generator | None = None,
    version: int = 0,
    device: torch.device | None = None,
) -> list[Episode]:
    """One episode per environment (built from its task row), all live ones sampled together
    each turn, their prompts on ``device`` (the policy's; default the CPU); see the module
    docstring."""
    device = device or torch.device("cpu")
    episodes = []
    for env, row in zip(envs, rows, strict=True):
        tokens = EpisodeTokens()
        tokens.add_context(text.prompt_ids(env.reset(row)), turn=0)
        episodes.append(Episode(tokens))
    for turn in range(1, limits.max_turns + 1):
        live = [i for i, episode in enumerate(episodes) if episode.live]
        if not live:
            break
        ids, mask = _left_padded([episodes[i].tokens.ids for i in live], engine.pad_id, device)
        out = engine.sample(ids, mask, 1, sampling, stop_ids, generator)
        turns = []
        for at, i in enumerate(live):
            kept = out.response_mask[at]
            sampled = out.response_ids[at][kept].tolist()
            logprobs = out.logprobs[at][kept].tolist()
            keep = cut_at_stop_string(sampled, text.decode, text.stop_strings)
            episodes[i].tokens.add_sampled(sampled[:keep], logprobs[:keep], version, turn)
            turns.append(_parsed(episodes[i], text, sampled[:keep]))
        answers = _steps(episodes, envs, live, turns, limits)
        for i, answer in zip(live, answers, strict=True):
            _answered(episodes[i], envs[i], text, turn, answer, limits)
    for episode, env in zip(episodes, envs, strict=True):
        if episode.live:  # out of turns
            episode.truncated = True
            _final_reward(episode, env)
    return episodes


def _final_reward(episode: Episode, env: Environment) -> None:
    """The episode's reward once it is over; a raising ``final_reward`` fails the episode."""
    try:
        episode.final_reward = float(env.final_reward())
    except Exception as err:  # noqa: BLE001 (a user's environment)
        episode.failed, episode.error = True, f"final_reward: {type(err).__name__}: {err}"


def _parsed(episode: Episode, text: EpisodeText, sampled: list[int]) -> ParsedTurn:
    """The turn just ``sampled``, read for tool calls (counted on the episode)."""
    parsed = text.parse(text.decode(sampled))
    episode.tool_calls += len(parsed.calls)
    episode.parse_errors += len(parsed.errors)
    return parsed


def _run_step(env: Environment, turn: ParsedTurn) -> Any:
    """``env.step(turn)``, an ``async def step``'s coroutine run to its end here."""
    result = env.step(turn)
    if inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


async def _awaited(result: Any) -> Any:
    return await result


def _steps(
    episodes: list[Episode],
    envs: Sequence[Environment],
    live: list[int],
    turns: list[ParsedTurn],
    limits: EpisodeLimits,
) -> list[Limited]:
    """The environments' answers to the live episodes' turns, within their limits: each step
    at most ``step_timeout_s`` and what is left of its episode's ``episode_timeout_s``, at most
    ``max_concurrency`` at once."""
    timeouts = [
        max(0.0, min(limits.step_timeout_s, limits.episode_timeout_s - episodes[i].step_s))
        for i in live
    ]
    calls = [
        (_run_step, (envs[i], turn), t) for i, turn, t in zip(live, turns, timeouts, strict=True)
    ]
    answers = run_all_limited(calls, limits.max_concurrency)
    for i, answer in zip(live, answers, strict=True):
        episodes[i].step_s += answer.seconds
        episodes[i].steps += 1
    return answers


def _answered(
    episode: Episode,
    env: Environment,
    text: EpisodeText,
    turn: int,
    answer: Any,
    limits: EpisodeLimits,
) -> None:
    """The environment's answer to the turn: its reward, the episode's end or the observation
    tokens of the next turn; a fault fails the episode."""
    if answer.error is not None or not isinstance(answer.value, StepResult):
        episode.timeouts += int(answer.timed_out)
        episode.failed = True
        episode.error = answer.error or f"step returned {type(answer.value).__name__}"
        return
    result: StepResult = answer.value
    for name, value in result.metrics.items():
        episode.metrics[name] = episode.metrics.get(name, 0.0) + float(value)
    chars = sum(len(str(m.get("content", ""))) for m in result.observations)
    if chars > limits.max_observation_chars:
        episode.failed = True
        episode.error = (
            f"an observation of {chars} characters (max_observation_chars "
            f"{limits.max_observation_chars})"
        )
        return
    episode.turn_rewards.append(float(result.reward))
    if result.done or result.truncated:
        episode.done, episode.truncated = result.done, result.truncated
        _final_reward(episode, env)
        return
    try:
        observation = fitted_observation(
            text.observation_ids,
            result.observations,
            limits.max_observation_tokens,
            limits.observation_truncation_side,
        )
    except ValueError as err:  # a character the tokenizer lacks, a template that refuses
        episode.failed, episode.error = True, f"observation: {str(err).splitlines()[0]}"
        return
    episode.tokens.add_context(observation, turn)
    if len(episode.tokens.ids) >= limits.max_episode_tokens:
        episode.truncated = True
        _final_reward(episode, env)
