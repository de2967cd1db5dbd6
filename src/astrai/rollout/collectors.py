"""How a run collects its rollouts and its held-out answers: the ``collector`` config group.

A collector is a subclass of ``Collector`` named by ``collector._target_``
(``conf/collector/<name>.yaml``), built once per run by ``build_collector`` from the run's parts
(``CollectorParts``: the tokenizer, the reward, the strategy's group size, sampling and
``mask_truncated``, the overlong penalty, the environment, the model's positions) and the node's
other keys (its constructor's keyword-only arguments). It answers three questions:

- ``collect``: a training round's problems -> a scored ``Rollout`` (``train_type.mask_truncated``
  already applied: the trainer trains on ``loss_mask`` as given);
- ``evaluate``: held-out problems -> one greedy answer each, scored (``Answers``);
- ``facts``: what the start banner says of the mode (``CollectorFacts``).

``SingleTurnCollector`` is one answer per prompt scored by the ``reward`` group
(``rollout.collect``); ``EpisodeCollector`` plays the ``env``'s multi-turn episodes
(``rollout.episodes.rollout``), scored by the environment. ``collector=auto`` (the default,
``_target_: null``) is the one that fits ``env`` (``collector_class``): the only place that asks
whether a run has an environment. A third mode is a third class (docs/environments.md).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, cast

import torch
from torch import nn

from astrai.imports import import_target
from astrai.models.tokenizer import Tokenizer
from astrai.rewards.base import Reward
from astrai.rewards.overlong import OverlongPenalty
from astrai.rollout.collect import collect_rollout, decode_responses, left_pad, prompt_context
from astrai.rollout.engines.engine import Engine
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.episodes.env_spec import EnvSpec
from astrai.rollout.episodes.rollout import (
    collect_episodes,
    episode_reward,
    episode_solved,
    play_episodes,
    split_opening,
)
from astrai.rollout.rollout import Rollout, ended_with_eos
from astrai.tasks.base import Problem

GROUP = "collector"


@dataclass(frozen=True)
class CollectorParts:
    """What every collector is built with (``build_collector``).

    Attributes:
        tokenizer: the policy's.
        reward: the run's reward (``reward`` group); its ``accuracy_threshold`` says what is
            correct.
        max_positions: the policy's ``max_position_embeddings`` (an episode's room).
        group_size, sampling, mask_truncated: the strategy's (``train_type.*``).
        overlong: DAPO's overlong penalty, on training rollouts only (None: off).
        env: the environment (``env=...``); None: ``env=single_turn``.
    """

    tokenizer: Tokenizer
    reward: Reward
    max_positions: int
    group_size: int = 1
    sampling: SamplingConfig | None = None
    mask_truncated: bool = False
    overlong: OverlongPenalty | None = None
    env: EnvSpec | None = None


class Answers(NamedTuple):
    """One greedy answer per held-out problem: its text, its length in tokens, its reward and
    whether it is correct."""

    responses: list[str]
    lengths: list[int]
    rewards: list[float]
    correct: list[bool]


@dataclass(frozen=True)
class CollectorFacts:
    """What the start banner says of a run's collector.

    Attributes:
        reward: who scores, where not the ``reward`` group's terms (``the environment's``).
        per_turn: ``max_new_tokens`` bounds each turn, not the whole response.
        line: a banner line of its own (the environment and its limits); None: none.
    """

    reward: str | None = None
    per_turn: bool = False
    line: str | None = None


class Collector(ABC):
    """Turns problems into scored rollouts and greedy answers (module docstring).

    ``episodes``: whether it plays the ``env``'s episodes (it needs ``env=...``; its rollouts
    carry ``sampled_mask`` and the ``env/*`` metrics), or runs without one (``env=single_turn``).
    """

    episodes: ClassVar[bool] = False

    def __init__(self, parts: CollectorParts) -> None:
        self.parts = parts

    @abstractmethod
    def collect(
        self,
        problems: list[Problem],
        model: nn.Module,
        version: int,
        engine: Engine,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        """``group_size`` samples of each of ``problems`` drawn by ``engine`` (on ``model``, the
        policy at ``version``), scored, ``mask_truncated`` applied; on ``model``'s device."""

    @abstractmethod
    def evaluate(
        self,
        engine: Engine,
        problems: list[Problem],
        greedy: SamplingConfig,
        batch_size: int,
        device: torch.device,
    ) -> Answers:
        """One ``greedy`` answer to each of ``problems`` (``batch_size`` at a time), scored."""

    def facts(self) -> CollectorFacts:
        """What the start banner says of this mode (default: nothing beyond the reward's)."""
        return CollectorFacts()

    def restored(self, rollout: Rollout) -> Rollout:
        """A rollout read back from a checkpoint's in-flight ones, as ``collect`` returns it
        today (default: as it is)."""
        return rollout


class SingleTurnCollector(Collector):
    """One answer per prompt, scored by the ``reward`` group (``env=single_turn``)."""

    def collect(
        self,
        problems: list[Problem],
        model: nn.Module,
        version: int,
        engine: Engine,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        parts = self.parts
        assert parts.sampling is not None, "a training collector needs the strategy's sampling"
        rollout = collect_rollout(
            model,  # type: ignore[arg-type]
            parts.tokenizer,
            problems,
            parts.group_size,
            parts.sampling,
            parts.reward,
            version,
            generator,
            overlong=parts.overlong,
            engine=engine,
        )
        return self.masked(rollout)

    def restored(self, rollout: Rollout) -> Rollout:
        """A checkpoint's in-flight rollout written before collectors applied
        ``mask_truncated`` gets it here (``masked``)."""
        return self.masked(rollout)

    def masked(self, rollout: Rollout) -> Rollout:
        """``train_type.mask_truncated``: the responses cut at the length limit leave the loss
        (``loss_mask``: the ones that end with a stop id)."""
        if self.parts.mask_truncated and rollout.loss_mask is None:
            ids, mask = rollout.response_ids, rollout.response_mask
            eos = ended_with_eos(ids, mask, self.parts.tokenizer.stop_ids)
            rollout.loss_mask = mask & eos[..., None]
        return rollout

    def evaluate(
        self,
        engine: Engine,
        problems: list[Problem],
        greedy: SamplingConfig,
        batch_size: int,
        device: torch.device,
    ) -> Answers:
        tokenizer, reward = self.parts.tokenizer, self.parts.reward
        responses: list[str] = []
        lengths: list[int] = []
        for start in range(0, len(problems), batch_size):
            chunk = [p.prompt for p in problems[start : start + batch_size]]
            ids, mask = left_pad(tokenizer, chunk, device)
            gen = engine.sample(ids, mask, 1, greedy, tokenizer.stop_ids)
            responses += decode_responses(tokenizer, gen.response_ids, gen.response_mask)
            lengths += gen.response_mask.sum(-1).tolist()
        texts = [p.text for p in problems]
        context = prompt_context(reward, problems, tokenizer)  # the turns, for a reward that asks
        rewards, _ = reward.score(texts, responses, [p.answer for p in problems], **context)
        return Answers(responses, lengths, rewards, reward.correct(rewards))


class EpisodeCollector(Collector):
    """The ``env``'s multi-turn episodes, scored by the environment (``env=...``)."""

    episodes = True

    @property
    def env(self) -> EnvSpec:
        if self.parts.env is None:
            raise ValueError("collector: EpisodeCollector plays an env's episodes (env=...)")
        return self.parts.env

    def collect(
        self,
        problems: list[Problem],
        model: nn.Module,
        version: int,
        engine: Engine,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        parts = self.parts
        assert parts.sampling is not None, "a training collector needs the strategy's sampling"
        return collect_episodes(
            model,  # type: ignore[arg-type]
            parts.tokenizer,
            problems,
            parts.group_size,
            parts.sampling,
            self.env,
            version,
            engine,
            generator,
            parts.reward.accuracy_threshold,
            parts.mask_truncated,
        )

    def evaluate(
        self,
        engine: Engine,
        problems: list[Problem],
        greedy: SamplingConfig,
        batch_size: int,
        device: torch.device,
    ) -> Answers:
        """One greedy episode per problem, correct when it is ``solved``
        (``rollout.episodes.rollout.episode_stats``), its response the episode's tokens after
        its opening; ``batch_size`` is not read (the episode runner batches its turns)."""
        tokenizer, limit = self.parts.tokenizer, self.parts.max_positions
        played = play_episodes(
            engine, tokenizer, self.env, problems, 1, greedy, limit, None, 0, device
        )
        after = [split_opening(e)[1] for e in played]
        responses, lengths = [tokenizer.decode(ids) for ids in after], [len(a) for a in after]
        rewards = [episode_reward(e) for e in played]
        threshold = self.parts.reward.accuracy_threshold
        return Answers(responses, lengths, rewards, [episode_solved(e, threshold) for e in played])

    def facts(self) -> CollectorFacts:
        """The environment scores (the reward group's terms score nothing:
        ``config.env_reward``), ``max_new_tokens`` bounds a turn, and a line names the
        environment, its parser and its limits."""
        return CollectorFacts(reward="the environment's", per_turn=True, line=env_line(self.env))


def env_line(env: EnvSpec) -> str:
    """``env: lookup_env.Lookup (parser hermes); max_turns 4, max_episode_tokens 4,096,
    step_timeout_s 30, workers process``."""
    limits = env.limits
    agent = f", agent {env.kwargs['agent']}" if "agent" in env.kwargs else ""
    return (
        f"env: {env.target} (parser {env.parser}{agent}); max_turns {limits.max_turns}, "
        f"max_episode_tokens {limits.max_episode_tokens:,}, step_timeout_s "
        f"{limits.step_timeout_s:g}, workers {env.workers}"
    )


def collector_class(node: Mapping[str, Any] | None, env: EnvSpec | None) -> type[Collector]:
    """The ``Collector`` subclass ``node["_target_"]`` names (imported as every plug point's is:
    ``astrai.imports.import_target``); ``collector=auto`` (no node, or ``_target_`` null) is
    ``EpisodeCollector`` with an environment (``env``), else ``SingleTurnCollector``.
    ValueError, one line naming the key, for a class that cannot be imported, is not a
    collector, or plays episodes without an environment (or none with one)."""
    target = None if node is None else node.get("_target_")
    if target is None:
        return SingleTurnCollector if env is None else EpisodeCollector
    kind = f"a collector (a subclass of {__name__}.Collector; select one with collector=<name>)"
    cls = cast(type[Collector], import_target(target, f"{GROUP}._target_", Collector, kind))
    if cls.episodes and env is None:
        raise ValueError(
            f"collector._target_={target!r} plays an environment's episodes: choose one "
            "(env=calculator, guess, custom) or collector=auto"
        )
    if not cls.episodes and env is not None:
        raise ValueError(
            f"collector._target_={target!r} plays no environment's episodes, and env="
            f"{env.target} is set: use collector=auto (or episodes), or env=single_turn"
        )
    return cls


def collector_knobs(cls: type[Collector], node: Mapping[str, Any] | None) -> dict[str, Any]:
    """The node's keys besides ``_target_``: ``cls``'s keyword-only constructor arguments;
    ValueError, one line, for a key it does not take."""
    given = {str(k): v for k, v in (node or {}).items() if k != "_target_"}
    accepted = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise ValueError(
            f"{GROUP}.{unknown[0]} is not a key of {cls.__module__}.{cls.__qualname__} (its "
            f"keys: {', '.join(['_target_', *accepted])})"
        )
    return given


def build_collector(node: Mapping[str, Any] | None, parts: CollectorParts) -> Collector:
    """The collector the ``collector`` node names (``collector_class``: ``auto`` by the
    environment in ``parts``), built with ``parts`` and the node's own keys."""
    cls = collector_class(node, parts.env)
    return cls(parts, **collector_knobs(cls, node))
