"""DAPO's soft overlong penalty (Yu et al. 2025, "overlong reward shaping"): a length penalty
added to the training reward, configured by ``reward.overlong_buffer`` and
``reward.overlong_penalty`` (``astrai.rewards.config.overlong_from_config``) and applied by
``astrai.rollout.collect.collect_rollout``. Re-exported by ``astrai.algorithms.rewards``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

# the reward term the penalty is kept and logged as (``reward/overlong``)
OVERLONG_TERM = "overlong"


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int, factor: float) -> Tensor:
    """DAPO's soft overlong penalty ("overlong reward shaping", Yu et al. 2025).

    With ``L_max = max_len``, ``B = buffer`` and a response of ``L`` tokens (EOS included)::

        penalty = 0                                 if L <= L_max − B
                = factor · (L_max − B − L) / B      if L_max − B < L <= L_max

    a ramp from 0 down to ``−factor`` over the last ``B`` tokens before the length limit
    (lengths past ``L_max`` cannot be sampled; they would extrapolate the ramp).

    Args:
        lengths: ``[...]`` response lengths in tokens (any integer or float dtype).
        max_len: ``L_max``, the sampling limit (``train_type.sampling.max_new_tokens``).
        buffer: ``B >= 1`` tokens.
        factor: ``>= 0``, the penalty at ``L = L_max``.

    Returns:
        ``[...]`` float32 penalties, all ``<= 0``.
    """
    if buffer < 1:
        raise ValueError(f"overlong buffer must be >= 1, got {buffer}")
    room = (max_len - buffer) - lengths.to(torch.float32)  # < 0 inside the buffer
    return room.clamp_max(0.0) * (factor / buffer)


@dataclass(frozen=True)
class OverlongPenalty:
    """``overlong_penalty`` with its settings bound: ``OverlongPenalty(64, 16, 1.0)(lengths)``."""

    max_len: int
    buffer: int
    factor: float = 1.0

    def __call__(self, lengths: Tensor) -> Tensor:
        return overlong_penalty(lengths, self.max_len, self.buffer, self.factor)
