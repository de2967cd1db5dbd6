"""Multi-turn episodes through an engine (issue 50, part 6; issue 58): what the trainer's
rollouts and evaluations under ``env=...`` run (``rollout.episodes.rollout``).

``run_episodes`` drives a batch of environments turn by turn: every live episode's tokens so far
are the prompt of its next turn (the engine continues from the ids as given:
``Engine.supports_prefix_continuation``), the sampled ids are appended as trainable, the turn's
text is read for tool calls (``envs.tool_calls``, or a user's parser), the environments answer,
and their observation tokens are appended as context, their text cut to
``max_observation_tokens`` (``rollout.episodes.observation_limit``). Every call into the environment
(construction, ``reset``, ``step``, ``final_reward``, a user's parser) runs in the episode's slot
within the limits and its value is checked at the door (``rollout.episodes.calls``): a fault fails
its episode with a cause, never the run.

The tokens are what the chat template renders for the same conversation: a turn that did not
sample the template's end token (cut at a stop string such as Hermes' ``</tool_call>``, cut by
``max_new_tokens`` or the episode's token budget, or ended by another stop id such as Llama
3.1's ``<|eom_id|>``) gets the end token as context before the observation
(``EpisodeText.end_ids``), since the template closes every assistant turn with it.

Limits bound: a turn keeps at most what is left of ``max_episode_tokens``; an observation that
would leave no room for another turn, or that follows the last turn (``max_turns``), is not
appended (the episode ends truncated); a call is never started for an episode with no time
left. Stop strings are not engine stop ids: a turn is cut after the first stop string its text
holds (found in O(log n) decodes), and the tokens sampled after it are dropped (never trained
on, never seen by the environment). The kept tokens are exactly what the engine sampled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from astrai.envs.base import Environment, Message
from astrai.envs.episode_tokens import EpisodeTokens
from astrai.envs.tool_calls import ParsedTurn, SampledTurn
from astrai.envs.values import (
    checked_messages,
    checked_parsed_turn,
    checked_step_result,
    finite_number,
)
from astrai.rollout.engines.engine import Engine
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.episodes.calls import (
    EnvSlots,
    Episode,
    call_all,
    checked,
    note_failure,
)
from astrai.rollout.episodes.observation_limit import fitted_observation

__all__ = ["Episode", "EpisodeLimits", "EpisodeText", "EnvSlots", "run_episodes"]


@dataclass(frozen=True)
class EpisodeLimits:
    """``max_turns``: assistant turns an episode may take; ``max_episode_tokens``: its tokens
    in all; ``max_observation_tokens``: one answer's tokens (its contents cut on
    ``observation_truncation_side``, ``left`` or ``right``: ``rollout.episodes.observation_limit``);
    ``max_observation_chars``: one answer's characters before it is a fault (a flooding
    tool); ``step_timeout_s``: one call's seconds (a step, ``reset``, the constructor...);
    ``episode_timeout_s``: an episode's environment seconds in all; ``max_concurrency``:
    environment calls run at once."""

    max_turns: int = 4
    max_episode_tokens: int = 1024
    max_observation_tokens: int = 256
    observation_truncation_side: str = "left"
    max_observation_chars: int = 100_000
    step_timeout_s: float = 10.0
    episode_timeout_s: float = 60.0
    max_concurrency: int = 16


@dataclass(frozen=True)
class EpisodeText:
    """How an episode's messages become tokens and its tokens text: ``prompt_ids`` (the opening
    messages with the generation prompt), ``observation_ids`` (the tokens after a sampled end
    token: ``envs.episode_tokens.ObservationRenderer.ids``), ``decode`` and ``parse`` (a
    tool-call format's parser), the format's ``stop_strings``; ``end_ids``: the template's
    end-of-turn token, put in as context after a turn that did not sample it (empty: no
    template, the plain-text protocol); ``user_parser``: ``parse`` is a user's function (run
    in the episode's slot, within the limits); ``max_token_chars``: the most characters one
    token decodes to (an observation's text is cut to ``max_observation_tokens`` times it
    before it is encoded), None: unknown; ``template``: the chat template's hash (``plain``:
    none), told to an environment with each turn (``envs.tool_calls.SampledTurn``)."""

    prompt_ids: Callable[[Sequence[Message]], list[int]]
    observation_ids: Callable[[Sequence[Message]], list[int]]
    decode: Callable[[list[int]], str]
    parse: Callable[[str], ParsedTurn]
    stop_strings: Sequence[str] = ()
    end_ids: tuple[int, ...] = ()
    user_parser: bool = False
    max_token_chars: int | None = None
    template: str = "plain"


def _holds_stop(ids: list[int], decode: Callable[[list[int]], str], stops: Sequence[str]) -> bool:
    text = decode(ids)
    return any(stop in text for stop in stops)


def cut_at_stop_string(
    ids: list[int],
    decode: Callable[[list[int]], str],
    stops: Sequence[str],
    decoded: str | None = None,
) -> int:
    """How many of ``ids`` a turn keeps: up to the first token whose text completes a stop
    string, all of them when none does. One decode when the turn holds no stop string, else a
    binary search over the prefixes (a prefix's text holding a stop string means every longer
    prefix's does): ``1 + ceil(log2 n)`` decodes, not one per prefix. ``decoded``: the text of
    all of ``ids``, where the caller has it already (the first decode then is spared)."""
    if not stops:
        return len(ids)
    whole = decode(ids) if decoded is None else decoded
    if not any(stop in whole for stop in stops):
        return len(ids)
    low, high = 1, len(ids)  # the shortest prefix holding a stop string lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        if _holds_stop(ids[:middle], decode, stops):
            high = middle
        else:
            low = middle + 1
    return low


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


@dataclass
class _Batch:
    """One call of ``run_episodes``: its episodes, their slots, how text becomes tokens, the
    limits; ``closed[i]``: episode i's last turn sampled the template's end token;
    ``reads_tokens``: its environments are given each turn's tokens (``SampledTurn``)."""

    episodes: list[Episode]
    slots: EnvSlots
    text: EpisodeText
    limits: EpisodeLimits
    closed: list[bool]
    device: torch.device
    reads_tokens: bool = False

    def call(self, requests: Sequence[tuple[int, str, tuple[Any, ...]]]) -> dict[int, Any]:
        limits = self.limits
        return call_all(
            self.slots,
            self.episodes,
            requests,
            limits.step_timeout_s,
            limits.episode_timeout_s,
            limits.max_concurrency,
        )

    def fail(self, i: int, cause: str, reason: str) -> None:
        note_failure(self.episodes[i], self.slots.environment, cause, reason)

    def check(self, i: int, value: Any, check: Callable[[Any], Any]) -> tuple[bool, Any]:
        return checked(self.episodes[i], self.slots.environment, value, check)


def run_episodes(
    engine: Engine,
    envs: Sequence[Environment] | EnvSlots,
    rows: Sequence[dict],
    text: EpisodeText,
    sampling: SamplingConfig,
    stop_ids: Sequence[int],
    limits: EpisodeLimits = EpisodeLimits(),
    generator: torch.Generator | None = None,
    version: int = 0,
    device: torch.device | None = None,
) -> list[Episode]:
    """One episode per environment slot (``envs``: slots, or environments already built, run
    in threads), built from its task row, all live ones sampled together each turn, their
    prompts on ``device`` (the policy's; default the CPU); see the module docstring."""
    device = device or torch.device("cpu")
    slots = envs if isinstance(envs, EnvSlots) else EnvSlots.of_instances(envs)
    if len(slots.hosts) != len(rows):
        raise ValueError(f"{len(slots.hosts)} environment slots for {len(rows)} task rows")
    episodes = [Episode(EpisodeTokens()) for _ in rows]
    batch = _Batch(episodes, slots, text, limits, [True] * len(rows), device, slots.reads_tokens)
    try:
        _open(batch, rows)
        for turn in range(1, limits.max_turns + 1):
            live = [i for i, episode in enumerate(batch.episodes) if episode.live]
            if not live:
                break
            turns = _sample_turn(batch, engine, live, sampling, stop_ids, generator, version, turn)
            _answer(batch, turns, turn)
        out_of_turns = [i for i, e in enumerate(batch.episodes) if e.live]
        for i in out_of_turns:
            batch.episodes[i].truncated = True
        _final_rewards(batch, out_of_turns)
        abandoned = slots.pool.live_abandoned()
        for episode in batch.episodes:
            episode.abandoned_workers = abandoned
    finally:
        slots.close()
    return batch.episodes


def _open(batch: _Batch, rows: Sequence[dict]) -> None:
    """Build each episode's environment in its slot and take its opening messages."""
    makes = [(i, "make", make) for i, make in enumerate(batch.slots.makes)]
    built = batch.call(makes)
    opened = batch.call([(i, "reset", (rows[i],)) for i in sorted(built)])
    for i, episode in enumerate(batch.episodes):
        if i not in opened:
            continue
        good, messages = batch.check(i, opened[i], lambda v: checked_messages(v, "reset()"))
        if not good:
            continue
        try:
            episode.tokens.add_context(batch.text.prompt_ids(messages), turn=0)
        except ValueError as err:  # a character the tokenizer lacks, a template that refuses
            batch.fail(i, "observation", f"opening: {str(err).splitlines()[0]}")


def _sample_turn(
    batch: _Batch,
    engine: Engine,
    live: list[int],
    sampling: SamplingConfig,
    stop_ids: Sequence[int],
    generator: torch.Generator | None,
    version: int,
    turn: int,
) -> dict[int, ParsedTurn]:
    """Sample the ``live`` episodes' next turn together, append each one's kept tokens (cut at
    a stop string and at the episode's token budget) and read it; the parsed turns by
    episode."""
    episodes, text = batch.episodes, batch.text
    rows = [episodes[i].tokens.ids for i in live]
    ids, mask = _left_padded(rows, engine.pad_id, batch.device)
    out = engine.sample(ids, mask, 1, sampling, stop_ids, generator)
    texts: dict[int, str] = {}
    facts: dict[int, SampledTurn] = {}
    for at, i in enumerate(live):
        tokens = episodes[i].tokens
        kept = out.response_mask[at]
        sampled = out.response_ids[at][kept].tolist()
        logprobs = out.logprobs[at][kept].tolist()
        whole = text.decode(sampled)  # one decode serves the stop search and the parser
        cut = cut_at_stop_string(sampled, text.decode, text.stop_strings, whole)
        keep = min(cut, batch.limits.max_episode_tokens - len(tokens.ids))
        start = len(tokens.ids)
        tokens.add_sampled(sampled[:keep], logprobs[:keep], version, turn)
        batch.closed[i] = bool(text.end_ids) and sampled[:keep][-1:] == list(text.end_ids[-1:])
        texts[i] = whole if keep == len(sampled) else text.decode(sampled[:keep])
        if batch.reads_tokens:  # an endpoint-backed environment: what it answers its client with
            stopped = keep == cut and _stopped(sampled[:cut], whole, text.stop_strings, stop_ids)
            facts[i] = SampledTurn(tokens.ids[:start], sampled[:keep], logprobs[:keep], version,
                                   texts[i], stopped, text.template)  # fmt: skip
    turns = _parsed(batch, texts)
    return {i: replace(parsed, sampled=facts[i]) if i in facts else parsed
            for i, parsed in turns.items()}  # fmt: skip


def _stopped(
    kept: list[int], whole: str, stop_strings: Sequence[str], stop_ids: Sequence[int]
) -> bool:
    """Whether a turn cut to ``kept`` (at a stop string, if any) ended by stopping: at a stop
    id, or at a stop string (``whole``: the text of all it sampled); else at a length limit."""
    return bool(kept) and kept[-1] in set(stop_ids) or any(s in whole for s in stop_strings)


def _parsed(batch: _Batch, texts: dict[int, str]) -> dict[int, ParsedTurn]:
    """Each episode's turn text read by the format's parser (counted on the episode): a
    built-in parser here, a user's in the episode's slot; checked at the door."""
    text = batch.text
    if text.user_parser:
        values = batch.call([(i, "parse", (text.parse, t)) for i, t in texts.items()])
    else:
        values = {i: text.parse(t) for i, t in texts.items()}
    name = getattr(text.parse, "__qualname__", "parser")
    turns = {}
    for i, value in values.items():
        good, parsed = batch.check(i, value, lambda v: checked_parsed_turn(v, name))
        if good:
            batch.episodes[i].tool_calls += len(parsed.calls)
            batch.episodes[i].parse_errors += len(parsed.errors)
            turns[i] = parsed
    return turns


def _answer(batch: _Batch, turns: dict[int, ParsedTurn], turn: int) -> None:
    """The environments' answers to the turns: each one's reward, and its episode's end or
    the observation tokens of its next turn; then the final rewards of the episodes that
    ended."""
    answers = batch.call([(i, "step", (parsed,)) for i, parsed in turns.items()])
    ended = []
    for i, value in answers.items():
        good, result = batch.check(i, value, checked_step_result)
        if good and _answered(batch, i, result, turn):
            ended.append(i)
    _final_rewards(batch, ended)


def _answered(batch: _Batch, i: int, result: Any, turn: int) -> bool:
    """Episode ``i``'s step ``result``: its metrics and reward, then its end, or its
    observation appended; whether it ended (not failed) now."""
    episode, limits = batch.episodes[i], batch.limits
    for name, value in result.metrics.items():
        episode.metrics[name] = episode.metrics.get(name, 0.0) + value
    chars = sum(len(m["content"]) for m in result.observations)
    if chars > limits.max_observation_chars:
        batch.fail(
            i,
            "flood",
            f"an observation of {chars} characters (env.max_observation_chars "
            f"{limits.max_observation_chars})",
        )
        return False
    episode.turn_rewards.append(result.reward)
    if result.done or result.truncated:
        episode.done, episode.truncated = result.done, result.truncated
        return True
    if turn == limits.max_turns:  # no observation after the last turn: out of turns
        episode.truncated = True
        return True
    text = batch.text
    try:
        observation = fitted_observation(
            text.observation_ids,
            result.observations,
            limits.max_observation_tokens,
            limits.observation_truncation_side,
            text.max_token_chars,
        )
    except ValueError as err:  # a character the tokenizer lacks, a template that refuses
        batch.fail(i, "observation", f"observation: {str(err).splitlines()[0]}")
        return False
    closing = [] if batch.closed[i] else list(text.end_ids)
    if len(episode.tokens.ids) + len(closing) + len(observation) >= limits.max_episode_tokens:
        episode.truncated = True  # no room for another turn: the observation is not appended
        return True
    episode.tokens.add_context(closing + observation, turn)
    return False


def _final_rewards(batch: _Batch, ended: list[int]) -> None:
    """The ``ended`` episodes' rewards once they are over (``final_reward``), checked."""
    values = batch.call([(i, "final_reward", ()) for i in ended])
    for i, value in values.items():
        good, reward = batch.check(i, value, lambda v: finite_number(v, "final_reward()"))
        if good:
            batch.episodes[i].final_reward = reward
