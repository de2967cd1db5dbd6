"""``infra.precision`` as an explicit argument: the dtype a forward pass computes in and the
autocast context that gives it, so sampling, evaluation and ``generate`` decode in the run's
precision because they are told it, not because of torch's ambient autocast state.

``fp32``: the weights' own dtype, no autocast. ``bf16``: bfloat16 autocast for the matmuls
(weights, gradients and optimizer state stay float32; log-softmax, ratios and KL run in float32,
``rollout.scoring``), and KV caches stored in bfloat16 (attention casts its keys and values to it
anyway, so storing them cast is the same arithmetic at half the memory).
"""

from __future__ import annotations

import torch

PRECISIONS = ("fp32", "bf16")


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    return precision


def compute_dtype(precision: str, weights: torch.dtype) -> torch.dtype:
    """The dtype activations (and KV caches) hold under ``precision`` for float32 ``weights``;
    weights already in a lower precision keep theirs."""
    if check_precision(precision) == "bf16" and weights == torch.float32:
        return torch.bfloat16
    return weights


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """bfloat16 autocast on ``device`` under ``bf16``; a disabled (no-op) one under ``fp32``,
    which also turns off an autocast the caller left on, so ``fp32`` means float32."""
    return torch.autocast(
        device.type, dtype=torch.bfloat16, enabled=check_precision(precision) == "bf16"
    )


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype of the autocast a caller opened on ``device`` (bf16 under ``autocast``'s
    ``bf16``), None where none is on: what a pass's caches and logits are in, for the code
    below a caller that chose the precision (scoring's KV caches, the token budgets)."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None
