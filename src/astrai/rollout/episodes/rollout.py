"""Multi-turn episodes as a ``Rollout`` (``env=...``): G episodes per problem through the episode
runner, laid out as the strategies read one-turn rollouts.

The prompt of a group is its episodes' opening tokens (an environment must open the same way
for the same task row); the response is everything after it, observations included
(``response_mask``: every real token, what the forwards read), and ``sampled_mask`` marks the
policy's own tokens: advantages, KL, GAE, entropy and the losses count those only. Each turn's
reward lands on its last sampled token and the final reward on the episode's last one
(``token_scores``, PPO's token rewards); ``rewards`` is their sum (GRPO's group baseline, the
logged reward). A failed episode (its environment hung, raised or flooded) is kept with reward 0
and no trainable token (``loss_mask``), and counted (``episode_stats``: ``env/*``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from astrai.envs.hosts import HostCall, HostPool, call_hosts
from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.collect import sampling_mode
from astrai.rollout.engines.engine import Engine
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.episodes.calls import FAILURE_CAUSES, note_failure
from astrai.rollout.episodes.env_spec import EnvSpec
from astrai.rollout.episodes.runner import EnvSlots, Episode, EpisodeLimits, run_episodes
from astrai.rollout.episodes.text import episode_text
from astrai.rollout.episodes.turn_rewards import token_rewards_of_turns
from astrai.rollout.rollout import Rollout
from astrai.tasks.base import Problem

_tools: dict[tuple[str, str, str], list[dict[str, Any]]] = {}  # ``environment_tools``, once
_tools_lock = threading.Lock()


def task_row(problem: Problem) -> dict[str, Any]:
    """The row an environment is built from: the problem's ``prompt``, ``answer``, ``text``
    and ``messages``."""
    return {
        "prompt": problem.prompt,
        "answer": problem.answer,
        "text": problem.text,
        "messages": problem.messages,
    }


def fitted_limits(limits: EpisodeLimits, max_positions: int, max_new_tokens: int) -> EpisodeLimits:
    """``limits`` with ``max_episode_tokens`` cut so that a last turn of ``max_new_tokens``
    still fits the model's ``max_positions``."""
    room = max(1, max_positions - max_new_tokens)
    if limits.max_episode_tokens <= room:
        return limits
    return EpisodeLimits(**{**vars(limits), "max_episode_tokens": room})


def engine_positions(engine: Engine, max_positions: int) -> int:
    """The positions one episode may fill: the model's ``max_positions``, or fewer where the
    engine holds fewer per request (vLLM's ``engine.max_model_len``: it refuses a longer one)."""
    limit = engine.max_model_len
    return max_positions if limit is None else min(max_positions, limit)


def play_episodes(
    engine: Engine,
    tokenizer: Tokenizer,
    spec: EnvSpec,
    problems: Sequence[Problem],
    copies: int,
    sampling: SamplingConfig,
    max_positions: int,
    generator: torch.Generator | None,
    version: int,
    device: torch.device,
) -> list[Episode]:
    """``copies`` episodes of each problem (problem-major), run to their ends, each in a slot
    of this thread's ``env.workers`` pool (``rollout.episodes.calls``)."""
    n = len(problems) * copies
    slots = EnvSlots.of_class(spec.cls, spec.kwargs, n, spec.workers, spec.target)
    rows = [task_row(p) for p in problems for _ in range(copies)]
    text = episode_text(tokenizer, spec, environment_tools(spec))
    limits = fitted_limits(
        spec.limits, engine_positions(engine, max_positions), sampling.max_new_tokens
    )
    return run_episodes(
        engine, slots, rows, text, sampling, tokenizer.stop_ids, limits, generator, version, device
    )


def environment_tools(spec: EnvSpec, pool: HostPool | None = None) -> list[dict[str, Any]]:
    """The tools ``spec``'s environment offers (``Environment.tools``), asked of a fresh one
    in a slot of its own (of ``pool``, else of a pool made for it), within the limits, once per
    process (they are its class's); a failure is a ``ValueError`` naming the environment (the
    start-up check calls this first)."""
    key = (spec.target, repr(sorted(spec.kwargs.items())), spec.workers)
    with _tools_lock:
        if key in _tools:
            return _tools[key]
    own = pool is None
    pool = HostPool(spec.workers) if pool is None else pool
    try:
        (host,) = pool.hosts(1)
        timeout = spec.limits.step_timeout_s
        (outcome,) = call_hosts([HostCall(host, "make", (spec.cls, spec.kwargs), timeout)], 1)
        if outcome.error is None:
            (outcome,) = call_hosts([HostCall(host, "tools", (), timeout)], 1)
    finally:
        if own:
            pool.close()
    if outcome.error is not None:
        raise ValueError(f"{spec.target}.tools(): {outcome.error}")
    tools = outcome.value
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError(f"{spec.target}.tools() must return a list of dicts (JSON schemas)")
    with _tools_lock:
        _tools[key] = tools
    return tools


def episode_solved(episode: Episode, threshold: float) -> bool:
    """Its environment's ``solved`` metric where it reports one, else its reward reaching
    ``threshold``."""
    solved = episode.metrics.get("solved")
    return bool(solved) if solved is not None else episode_reward(episode) >= threshold


def episode_stats(episode: Episode, threshold: float) -> dict[str, float]:
    """One episode's numbers for ``env/*``: the runner's counts, ``solved``
    (``episode_solved``), then its environment's own metrics."""
    stats = {
        "turns": float(max(episode.tokens.turns, default=0)),
        "tool_calls": float(episode.tool_calls),
        "parse_errors": float(episode.parse_errors),
        "timeouts": float(episode.timeouts),
        "failed": float(episode.failed),
        **{f"failed_{cause}": float(episode.cause == cause) for cause in FAILURE_CAUSES},
        "abandoned_workers": float(episode.abandoned_workers),
        "steps": float(episode.steps),
        "step_s": episode.step_s,
        "solved": float(episode_solved(episode, threshold)),
    }
    own = {name: float(v) for name, v in episode.metrics.items() if name not in stats}
    return {**stats, **own}


def episode_reward(episode: Episode) -> float:
    """The episode's reward: its turns' and the final one summed; 0 for a failed episode."""
    return 0.0 if episode.failed else sum(episode.turn_rewards) + episode.final_reward


def split_opening(episode: Episode) -> tuple[list[int], list[int]]:
    """The episode's opening ids (its prompt: the turn-0 tokens, which come first) and the
    rest (the response)."""
    n = episode.tokens.turns.count(0)
    return episode.tokens.ids[:n], episode.tokens.ids[n:]


def _token_scores(episode: Episode, sampled: Tensor, turns: Tensor) -> Tensor:
    """``[R]`` the episode's rewards on its tokens (``turn_rewards.token_rewards_of_turns``)."""
    if episode.failed or not episode.turn_rewards and not episode.final_reward:
        return torch.zeros(sampled.shape, dtype=torch.float32, device=sampled.device)
    rewards = torch.tensor(episode.turn_rewards, dtype=torch.float32, device=sampled.device)
    final = torch.tensor(episode.final_reward, dtype=torch.float32, device=sampled.device)
    return token_rewards_of_turns(sampled, turns, rewards, final)


def _group_opening(
    episodes: list[Episode], openings: list[list[int]], pad_id: int, text: str, environment: str
) -> list[int]:
    """The prompt of one group: its episodes' shared opening. Episodes that failed before
    they opened have none (they are out of the loss and the group statistics either way);
    where the others differ (a ``reset`` that is not deterministic: a random seed or a date
    in its messages) the whole group fails (``opening``), not the run. ``[pad_id]`` for a
    group where none opened: one token of context for rows that hold nothing."""
    opened = [opening for opening in openings if opening]
    if any(opening != opened[0] for opening in opened):
        reason = (
            f"reset(row) opened the episodes of the task row {text!r} differently: it must "
            "return the same messages for the same row"
        )
        for episode in episodes:
            if not episode.failed:
                note_failure(episode, environment, "opening", reason)
    return opened[0] if opened else [pad_id]


def episodes_rollout(
    episodes: list[Episode],
    problems: Sequence[Problem],
    pad_id: int,
    decode: Any,
    version: int,
    threshold: float,
    mask_truncated: bool = False,
    environment: str = "environment",
) -> Rollout:
    """``len(problems) × G`` episodes (problem-major) as a ``Rollout`` (module docstring).
    ``mask_truncated``: an episode cut by a limit leaves the loss too; ``environment``: its
    name in the warning about a group opened differently."""
    b = len(problems)
    g = len(episodes) // b
    split = [split_opening(e) for e in episodes]
    openings, rest = [opening for opening, _ in split], [after for _, after in split]
    group_openings = [
        _group_opening(episodes[i * g : (i + 1) * g], openings[i * g : (i + 1) * g], pad_id,
                       problems[i].text, environment)
        for i in range(b)
    ]  # fmt: skip
    width = max(len(opening) for opening in group_openings)
    length = max(1, max(len(r) for r in rest))
    prompt_ids = torch.full((b, width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros(b, width, dtype=torch.bool)
    for i in range(b):
        first = group_openings[i]
        prompt_ids[i, width - len(first) :] = torch.tensor(first, dtype=torch.long)
        prompt_mask[i, width - len(first) :] = True
    shape = (b * g, length)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    mask, sampled = torch.zeros(shape, dtype=torch.bool), torch.zeros(shape, dtype=torch.bool)
    logprobs, scores = torch.zeros(shape), torch.zeros(shape)
    versions = torch.full(shape, -1, dtype=torch.long)  # -1: not sampled (observations, padding)
    keep = torch.zeros(shape, dtype=torch.bool)
    for row, (episode, opening) in enumerate(zip(episodes, openings, strict=True)):
        tokens, n = episode.tokens, len(opening)
        size = len(tokens.ids) - n
        ids[row, :size] = torch.tensor(tokens.ids[n:], dtype=torch.long)
        mask[row, :size] = True
        sampled[row, :size] = torch.tensor(tokens.trainable[n:], dtype=torch.bool)
        logprobs[row, :size] = torch.tensor(tokens.logprobs[n:])
        versions[row, :size] = torch.tensor(tokens.versions[n:], dtype=torch.long)
        turns = torch.zeros(length, dtype=torch.long)
        turns[:size] = torch.tensor(tokens.turns[n:], dtype=torch.long)
        scores[row] = _token_scores(episode, sampled[row], turns)
        masked_out = episode.failed or (mask_truncated and episode.truncated)
        keep[row] = sampled[row] & (not masked_out)
    stats = [episode_stats(e, threshold) for e in episodes]
    names = sorted({name for s in stats for name in s})
    texts = [decode(r) for r in rest]
    return Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=ids.view(b, g, -1),
        response_mask=mask.view(b, g, -1),
        logprobs=logprobs.view(b, g, -1),
        rewards=torch.tensor([episode_reward(e) for e in episodes]).view(b, g),
        policy_version=version,
        sample_versions=torch.full((b, g), version, dtype=torch.long),
        token_versions=versions.view(b, g, -1),
        prompts=[p.text for p in problems],
        responses=[texts[i * g : (i + 1) * g] for i in range(b)],
        loss_mask=keep.view(b, g, -1),
        sampled_mask=sampled.view(b, g, -1),
        token_scores=scores.view(b, g, -1),
        valid=torch.tensor([not e.failed for e in episodes]).view(b, g),
        episode_stats={
            name: torch.tensor([s.get(name, 0.0) for s in stats]).view(b, g) for name in names
        },
    )


def collect_episodes(
    policy: LlamaForCausalLM,
    tokenizer: Tokenizer,
    problems: list[Problem],
    group_size: int,
    sampling: SamplingConfig,
    spec: EnvSpec,
    policy_version: int,
    engine: Engine,
    generator: torch.Generator | None = None,
    accuracy_threshold: float = 1.0,
    mask_truncated: bool = False,
) -> Rollout:
    """``group_size`` episodes of each problem sampled with ``engine`` (the policy's) as a
    ``Rollout`` on the policy's device (module docstring)."""
    device = policy.lm_head.weight.device
    with sampling_mode(policy, engine):
        episodes = play_episodes(
            engine,
            tokenizer,
            spec,
            problems,
            group_size,
            sampling,
            policy.config.max_position_embeddings,
            generator,
            policy_version,
            device,
        )
    rollout = episodes_rollout(
        episodes,
        problems,
        tokenizer.pad_id,
        tokenizer.decode,
        policy_version,
        accuracy_threshold,
        mask_truncated,
        spec.target,
    )
    return rollout.to(device)
