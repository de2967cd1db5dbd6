"""Flattened views of a prepared ``Rollout``, split into shuffled minibatches, and the split of
one update epoch (``EpochSplit``): its minibatches and their micro-batches, which π_old and the
reference are scored through so that all three passes round alike (``docs/algorithms.md``)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from astrai.models.length_parts import trim_columns
from astrai.rollout.rollout import Rollout


@dataclass
class Minibatch:
    """``M`` sequences (any mix of prompts and group members). Token tensors are ``[M, R]``,
    prompts ``[M, P]``; ``values``/``returns`` only for strategies with a critic;
    ``ref_logprobs`` None where the reference was not scored (``kl_coef`` 0, between the
    ``logger.kl_every`` steps).
    ``loss_mask``: the tokens the losses count (default: ``response_mask``; without the
    responses cut at the length limit under ``train_type.mask_truncated``).
    ``is_weights``: the engine mismatch correction's per-token loss weights; None = 1.
    ``old_logprobs``: π_old; None where the step's one update takes its own forward, detached
    (``flatten_rollout``'s ``old_from_update``).
    ``teacher_logprobs`` ``[M, R]``, ``teacher_topk_ids``/``teacher_topk_logprobs``
    ``[M, R, K]``: the distillation teacher's (``Rollout``'s), for its loss estimators."""

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    old_logprobs: Tensor | None
    ref_logprobs: Tensor | None
    advantages: Tensor
    values: Tensor | None = None
    returns: Tensor | None = None
    loss_mask: Tensor = None  # type: ignore[assignment]  # set in __post_init__
    is_weights: Tensor | None = None
    teacher_logprobs: Tensor | None = None
    teacher_topk_ids: Tensor | None = None
    teacher_topk_logprobs: Tensor | None = None

    def __post_init__(self) -> None:
        if self.loss_mask is None:
            self.loss_mask = self.response_mask

    def select(self, index: Tensor) -> Minibatch:
        """Rows ``index`` of every tensor."""
        # each field's own type (Tensor or None), which one dict value type cannot say per name
        picked: dict[str, Any] = {
            f.name: (getattr(self, f.name)[index] if getattr(self, f.name) is not None else None)
            for f in fields(self)
        }
        return Minibatch(**picked)

    def trimmed(self) -> Minibatch:
        """The same rows without the columns none of them uses (``models.length_parts``):
        prompts from their first used column, every ``[M, R]`` tensor to the last used one."""
        first, end = trim_columns(self.prompt_mask, self.response_mask)
        width = self.response_ids.shape[1]
        if first == 0 and end == width:
            return self
        picked: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                picked[f.name] = None
            elif f.name in ("prompt_ids", "prompt_mask"):
                picked[f.name] = value[:, first:]
            else:  # every other tensor is per response token, [M, R] (or [M, R, K])
                picked[f.name] = value[:, :end]
        return Minibatch(**picked)

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.sum().item())


def flatten_rollout(rollout: Rollout, old_from_update: bool = False) -> Minibatch:
    """All ``B * G`` sequences of a prepared rollout (targets pinned) as one ``Minibatch``;
    ``old_from_update``: π_old is the update's own forward (``old_logprobs`` None)."""
    prompt_ids, prompt_mask = rollout.flat_prompts()
    response_mask = rollout.flat("response_mask")
    return Minibatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=rollout.flat("response_ids"),
        response_mask=response_mask,
        old_logprobs=None if old_from_update else rollout.flat("logprobs"),
        ref_logprobs=rollout.flat("ref_logprobs") if rollout.ref_logprobs is not None else None,
        advantages=rollout.flat("advantages"),
        values=rollout.flat("values") if rollout.values is not None else None,
        returns=rollout.flat("returns") if rollout.returns is not None else None,
        loss_mask=rollout.flat("loss_mask") if rollout.loss_mask is not None else response_mask,
        is_weights=rollout.flat("is_weights") if rollout.is_weights is not None else None,
        **{
            name: rollout.flat(name)
            for name in ("teacher_logprobs", "teacher_topk_ids", "teacher_topk_logprobs")
            if getattr(rollout, name) is not None
        },
    )


def minibatch_rows(
    rows: int, num_minibatches: int, generator: torch.Generator | None, device: torch.device
) -> list[Tensor]:
    """One epoch's minibatches of ``rows`` sequences: a permutation drawn from ``generator``
    (a CPU one, or the global stream for None) cut into ``num_minibatches`` equal parts, each
    ``[rows / num_minibatches]`` row indices on ``device``."""
    order = torch.randperm(rows, generator=generator).to(device)
    return list(order.chunk(num_minibatches))


@dataclass(frozen=True)
class EpochSplit:
    """How one update epoch runs over a flat rollout's ``N`` rows: ``minibatches`` (each
    ``[M]`` rows of the flat rollout, one optimizer step) and, for each, ``micro_batches``
    (``[m]`` indices into its rows, one forward and backward each: ``training.accumulation``).

    Drawn before the reference and π_old are scored, so that they run the very forwards the
    update's first epoch runs (``passes``): the same rows, in the same order and width, so the
    same roundings; the first minibatch's ratio is then exactly 1 and the KL to the reference
    of the unchanged policy exactly 0, in bf16 as in fp32."""

    minibatches: list[Tensor]
    micro_batches: list[list[Tensor]]

    def passes(self) -> list[tuple[Tensor, bool]]:
        """The forwards in the update's order: each ``(rows [n], trimmed)``, rows of the flat
        rollout, ``trimmed`` where the minibatch runs in several micro-batches (each cut to the
        columns its rows use, ``Minibatch.trimmed``); a minibatch run whole keeps every
        column (``accumulation.accumulate_gradients``)."""
        passes: list[tuple[Tensor, bool]] = []
        for rows, parts in zip(self.minibatches, self.micro_batches, strict=True):
            if len(parts) == 1:
                passes.append((rows, False))
            else:
                passes.extend((rows[part], True) for part in parts)
        return passes
