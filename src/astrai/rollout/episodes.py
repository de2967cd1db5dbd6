"""Multi-turn episodes through an engine (issue 50, part 6; not wired into the trainer yet).

``run_episodes`` drives a batch of environments turn by turn: every live episode's tokens so far
are the prompt of its next turn (the engine continues from the ids as given:
``Engine.supports_prefix_continuation``), the sampled ids are appended as trainable, the turn's
text is read for tool calls (``envs.tool_calls``), the environment answers within a time limit
(``envs.tool_limits.run_limited``), and its observation tokens are appended as context, cut to
``max_observation_tokens``. An episode ends when its environment says so, at ``max_turns``, or
when its tokens reach ``max_episode_tokens`` (truncated). A step that raises or times out ends
its episode as ``failed``: the trainer is to mask it out (count it in ``env/*``), never to stop.

Stop strings (Hermes' ``</tool_call>``) are not engine stop ids: a turn is cut after the first
stop string its text holds, and the tokens sampled after it are dropped (never trained on, never
seen by the environment). The kept tokens are exactly what the engine sampled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.episode_tokens import EpisodeTokens
from astrai.envs.tool_calls import ParsedTurn
from astrai.envs.tool_limits import run_limited
from astrai.rollout.engine import Engine
from astrai.rollout.sampler import SamplingConfig


@dataclass(frozen=True)
class EpisodeLimits:
    """``max_turns``: assistant turns an episode may take; ``max_episode_tokens``: its tokens
    in all; ``max_observation_tokens``: one answer's tokens (the rest cut, its end kept: the
    next turn's opening); ``step_timeout_s``: one environment step's seconds."""

    max_turns: int = 4
    max_episode_tokens: int = 1024
    max_observation_tokens: int = 256
    step_timeout_s: float = 10.0


@dataclass
class Episode:
    """One episode's outcome: its ``tokens``, rewards per turn, the final reward, and how it
    ended (``done``, ``truncated``, or ``failed`` with the ``error``)."""

    tokens: EpisodeTokens
    turn_rewards: list[float] = field(default_factory=list)
    final_reward: float = 0.0
    done: bool = False
    truncated: bool = False
    failed: bool = False
    error: str | None = None
    tool_calls: int = 0
    parse_errors: int = 0

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
        for at, i in enumerate(live):
            kept = out.response_mask[at]
            sampled = out.response_ids[at][kept].tolist()
            logprobs = out.logprobs[at][kept].tolist()
            keep = cut_at_stop_string(sampled, text.decode, text.stop_strings)
            _take_turn(
                episodes[i], envs[i], text, turn, sampled[:keep], logprobs[:keep], version, limits
            )
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


def _take_turn(
    episode: Episode,
    env: Environment,
    text: EpisodeText,
    turn: int,
    sampled: list[int],
    logprobs: list[float],
    version: int,
    limits: EpisodeLimits,
) -> None:
    """Append the turn's sampled tokens, let the environment answer, append its observations."""
    episode.tokens.add_sampled(sampled, logprobs, version, turn)
    parsed = text.parse(text.decode(sampled))
    episode.tool_calls += len(parsed.calls)
    episode.parse_errors += len(parsed.errors)
    answer = run_limited(env.step, parsed, timeout_s=limits.step_timeout_s)
    if answer.error is not None or not isinstance(answer.value, StepResult):
        episode.failed = True
        episode.error = answer.error or f"step returned {type(answer.value).__name__}"
        return
    result: StepResult = answer.value
    episode.turn_rewards.append(result.reward)
    if result.done or result.truncated:
        episode.done, episode.truncated = result.done, result.truncated
        _final_reward(episode, env)
        return
    observation = text.observation_ids(result.observations)
    if len(observation) > limits.max_observation_tokens:  # its end opens the next turn: kept
        observation = observation[-limits.max_observation_tokens :]
    episode.tokens.add_context(observation, turn)
    if len(episode.tokens.ids) >= limits.max_episode_tokens:
        episode.truncated = True
