"""The ``Rollout``: one step's prompts, sampled responses and pinned training targets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.nn import functional as F  # noqa: N812

# the fields indexed by prompt (dimension 0)
ROW_FIELDS = (
    "prompt_ids",
    "prompt_mask",
    "response_ids",
    "response_mask",
    "logprobs",
    "rewards",
    "ref_logprobs",
    "values",
    "advantages",
    "returns",
    "loss_mask",
    "behaviour_logprobs",
    "is_weights",
    "sample_versions",
    "token_versions",
    "sampled_mask",
    "token_scores",
    "valid",
    "teacher_logprobs",
    "teacher_topk_ids",
    "teacher_topk_logprobs",
)


@dataclass
class Rollout:
    """Everything a strategy needs from one round of sampling.

    Shapes: B prompts × G responses each × R response tokens, P prompt tokens.

    Attributes:
        prompt_ids, prompt_mask: ``[B, P]`` left-padded prompts (mask True on real tokens).
        response_ids, response_mask: ``[B, G, R]`` right-padded responses; EOS is included.
        logprobs: ``[B, G, R]`` behaviour logprobs recorded while sampling.
        rewards: ``[B, G]`` task reward per response (lands on the last response token).
        policy_version: optimizer steps the sampling policy had taken.
        sample_versions: ``[B, G]`` (long) each response's ``policy_version``: the policy
            that drew it (the staleness guard, ``rollout.staleness``, reads these).
        token_versions: ``[B, G, R]`` (long) the policy version that sampled each response
            token, -1 where none did (padding, an episode's observations): an episode whose
            turns were sampled across a weight update keeps each turn's version. None: a
            rollout made before it was recorded (a checkpoint's older in-flight one).
        sampled_mask: ``[B, G, R]`` a multi-turn episode's sampled tokens (its actions): the
            response is then the whole episode after its opening prompt, observations
            included (``response_mask``: every real token, for the forwards), and advantages,
            KL, GAE and the losses count these only; None = ``response_mask`` (one turn).
        token_scores: ``[B, G, R]`` an episode's rewards on its tokens (each turn's on its last
            sampled token, the final one on the last; ``algorithms.turn_credit``), what PPO's
            token rewards take instead of ``rewards`` on the last token; None = one turn.
        episode_stats: ``[B, G]`` per episode numbers for the ``env/*`` metrics (turns, tool
            calls, errors, ...); empty for one-turn rollouts.
        prompts, responses: texts for logging (``responses[b][g]``).
        reward_terms: ``[B, G]`` scores of each named reward term (``rewards`` is their
            weighted sum), for the ``reward/<name>`` metrics.
        ref_logprobs, values, advantages, returns: ``[B, G, R]`` targets filled once by
            ``Strategy.prepare`` and then pinned for every replayed gradient step;
            ``ref_logprobs`` stays None where the reference was not scored (``kl_coef`` 0,
            between the ``logger.kl_every`` steps).
        loss_mask: ``[B, G, R]`` the tokens the losses count when it differs from
            ``response_mask`` (``train_type.mask_truncated``); None = ``response_mask``.
        behaviour_logprobs: ``[B, G, R]`` the engine's logprobs, kept where the trainer
            recomputed π_old into ``logprobs`` (``engine.old_logprobs: recompute``); else None.
        is_weights: ``[B, G, R]`` the mismatch correction's loss weights
            (``algorithms.correction``); None = no correction.
        valid: ``[B, G]`` bool, True = the response counts in group and batch statistics (the
            group baselines, whitening, dynamic sampling's filter, the reward metrics): False
            for a failed episode (its environment hung, raised or flooded), whose reward 0 is
            the fault's, not the policy's; such a member gets advantage 0. None = all valid
            (every one-turn rollout).
        teacher_logprobs: ``[B, G, R]`` the distillation teacher's logprobs of the sampled
            tokens, pinned by ``training.distillation`` (``distill=opd``); else None.
        teacher_topk_ids, teacher_topk_logprobs: ``[B, G, R, K]`` the teacher's K most likely
            ids at each response position and their logprobs (``distill.estimator:
            forward_topk``); else None.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    logprobs: Tensor
    rewards: Tensor
    policy_version: int
    prompts: list[str] = field(default_factory=list)
    responses: list[list[str]] = field(default_factory=list)
    reward_terms: dict[str, Tensor] = field(default_factory=dict)
    ref_logprobs: Tensor | None = None
    values: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None
    loss_mask: Tensor | None = None
    behaviour_logprobs: Tensor | None = None
    is_weights: Tensor | None = None
    sample_versions: Tensor | None = None
    token_versions: Tensor | None = None
    sampled_mask: Tensor | None = None
    token_scores: Tensor | None = None
    valid: Tensor | None = None
    teacher_logprobs: Tensor | None = None
    teacher_topk_ids: Tensor | None = None
    teacher_topk_logprobs: Tensor | None = None
    episode_stats: dict[str, Tensor] = field(default_factory=dict)

    def action_mask(self) -> Tensor:
        """``[B, G, R]`` the tokens the policy sampled: ``sampled_mask``, else the responses."""
        return self.response_mask if self.sampled_mask is None else self.sampled_mask

    def valid_action_mask(self) -> Tensor:
        """``[B, G, R]`` the sampled tokens of the valid responses (``valid``): what batch
        statistics (whitening, advantage and value means) count; ``action_mask`` when all are."""
        mask = self.action_mask()
        return mask if self.valid is None else mask & self.valid[..., None]

    def select(self, rows: slice) -> Rollout:
        """The prompts ``rows`` (whole groups) with their responses and any pinned targets."""
        tensors = {
            name: (value[rows] if value is not None else None)
            for name in ROW_FIELDS
            for value in (getattr(self, name),)
        }
        return Rollout(
            policy_version=self.policy_version,
            prompts=self.prompts[rows],
            responses=self.responses[rows],
            reward_terms={name: scores[rows] for name, scores in self.reward_terms.items()},
            episode_stats={name: v[rows] for name, v in self.episode_stats.items()},
            **tensors,  # type: ignore[arg-type]
        )

    def take(self, rows: Sequence[int]) -> Rollout:
        """The prompts at ``rows`` (whole groups, in that order), like ``select``."""
        index = torch.tensor(list(rows), dtype=torch.long, device=self.response_ids.device)
        tensors = {
            name: (value.index_select(0, index) if value is not None else None)
            for name in ROW_FIELDS
            for value in (getattr(self, name),)
        }
        return Rollout(
            policy_version=self.policy_version,
            prompts=[self.prompts[i] for i in rows] if self.prompts else [],
            responses=[self.responses[i] for i in rows] if self.responses else [],
            reward_terms={n: v.index_select(0, index) for n, v in self.reward_terms.items()},
            episode_stats={n: v.index_select(0, index) for n, v in self.episode_stats.items()},
            **tensors,  # type: ignore[arg-type]
        )

    def to(self, device: torch.device | str) -> Rollout:
        """This rollout with every tensor on ``device`` (itself when they are there already)."""
        tensors = {
            name: (value.to(device) if value is not None else None)
            for name in ROW_FIELDS
            for value in (getattr(self, name),)
        }
        return Rollout(
            policy_version=self.policy_version,
            prompts=self.prompts,
            responses=self.responses,
            reward_terms={n: v.to(device) for n, v in self.reward_terms.items()},
            episode_stats={n: v.to(device) for n, v in self.episode_stats.items()},
            **tensors,  # type: ignore[arg-type]
        )

    @property
    def num_prompts(self) -> int:
        return self.response_ids.shape[0]

    @property
    def group_size(self) -> int:
        return self.response_ids.shape[1]

    def flat_prompts(self) -> tuple[Tensor, Tensor]:
        """Prompts repeated per response: ``[B * G, P]`` ids and mask."""
        g = self.group_size
        return self.prompt_ids.repeat_interleave(g, 0), self.prompt_mask.repeat_interleave(g, 0)

    def flat(self, name: str) -> Tensor:
        """A ``[B, G, ...]`` field as ``[B * G, ...]``."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"rollout field {name!r} has not been prepared")
        return value.flatten(0, 1)


def cat_rollouts(parts: Sequence[Rollout], pad_id: int) -> Rollout:
    """Sampled (not yet prepared) rollouts of one policy version as one: prompts left-padded to
    the widest, responses right-padded to the longest (ids ``pad_id``, masks False, logprobs 0).

    Args:
        parts: rollouts with the same group size and no pinned targets.
        pad_id: the tokenizer's padding id.
    """
    if not parts:
        raise ValueError("cat_rollouts needs at least one rollout")
    if any(p.ref_logprobs is not None or p.advantages is not None for p in parts):
        raise ValueError("cat_rollouts joins rollouts before Strategy.prepare")
    width = max(p.prompt_ids.shape[-1] for p in parts)
    length = max(p.response_ids.shape[-1] for p in parts)

    def left(x: Tensor, value: float | bool) -> Tensor:
        return F.pad(x, (width - x.shape[-1], 0), value=value)

    def right(x: Tensor, value: float | bool) -> Tensor:
        return F.pad(x, (0, length - x.shape[-1]), value=value)

    # joined only where every part has them
    versions = [p.sample_versions for p in parts if p.sample_versions is not None]
    token_versions = [p.token_versions for p in parts if p.token_versions is not None]
    # a part without ``valid`` has every response valid
    valid = [
        torch.ones_like(p.rewards, dtype=torch.bool) if p.valid is None else p.valid for p in parts
    ]
    # the loss mask (mask_truncated, an episode's failures: set by the collector) where any part
    # has one; a part without it trains on every response token
    loss = [p.response_mask if p.loss_mask is None else p.loss_mask for p in parts]
    has_loss_mask = any(p.loss_mask is not None for p in parts)
    episodes = [p.sampled_mask is not None for p in parts]
    if any(episodes) and not all(episodes):
        raise ValueError("cat_rollouts joins episodes with episodes, one-turn with one-turn")
    return Rollout(
        prompt_ids=torch.cat([left(p.prompt_ids, pad_id) for p in parts]),
        prompt_mask=torch.cat([left(p.prompt_mask, False) for p in parts]),
        response_ids=torch.cat([right(p.response_ids, pad_id) for p in parts]),
        response_mask=torch.cat([right(p.response_mask, False) for p in parts]),
        logprobs=torch.cat([right(p.logprobs, 0.0) for p in parts]),
        rewards=torch.cat([p.rewards for p in parts]),
        policy_version=parts[0].policy_version,
        sample_versions=torch.cat(versions) if len(versions) == len(parts) else None,
        token_versions=(
            torch.cat([right(v, -1) for v in token_versions])
            if len(token_versions) == len(parts)
            else None
        ),
        valid=torch.cat(valid) if any(p.valid is not None for p in parts) else None,
        loss_mask=torch.cat([right(m, False) for m in loss]) if has_loss_mask else None,
        prompts=[text for p in parts for text in p.prompts],
        responses=[group for p in parts for group in p.responses],
        reward_terms={
            name: torch.cat([p.reward_terms[name] for p in parts]) for name in parts[0].reward_terms
        },
        sampled_mask=torch.cat([right(p.sampled_mask, False) for p in parts])  # type: ignore[arg-type]
        if all(episodes)
        else None,
        token_scores=torch.cat([right(p.token_scores, 0.0) for p in parts])  # type: ignore[arg-type]
        if all(episodes)
        else None,
        episode_stats={
            name: torch.cat([p.episode_stats[name] for p in parts])
            for name in parts[0].episode_stats
        },
    )


def ended_with_eos(
    response_ids: Tensor, response_mask: Tensor, eos_id: int | Sequence[int]
) -> Tensor:
    """``[..., R]`` right-padded responses -> ``[...]`` bool: the last valid token is EOS, or
    one of the tokenizer's ``stop_ids`` when ``eos_id`` is a sequence (False for a response cut
    at the length limit, and for an empty one)."""
    lengths = response_mask.sum(-1)
    last = response_ids.gather(-1, (lengths - 1).clamp_min(0)[..., None]).squeeze(-1)
    return is_stop_token(last, stop_ids_on(eos_id, last.device)) & (lengths > 0)


def stop_ids_on(stop: int | Sequence[int], device: torch.device) -> int | Tensor:
    """The ids that end a response, made once for ``is_stop_token``: one id as an int (a plain
    comparison), several as a tensor on ``device``."""
    ids = [stop] if isinstance(stop, int) else list(stop)
    return ids[0] if len(ids) == 1 else torch.tensor(ids, device=device)


def is_stop_token(tokens: Tensor, stop: int | Tensor) -> Tensor:
    """Whether each of ``tokens`` ends a response (``stop`` from ``stop_ids_on``)."""
    return tokens == stop if isinstance(stop, int) else torch.isin(tokens, stop)
