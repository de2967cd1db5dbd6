"""``infra.precision`` as an explicit argument: the dtype a forward pass computes in and the
autocast context that gives it, so sampling, evaluation and ``generate`` decode in the run's
precision because they are told it, not because of torch's ambient autocast state.

``fp32``: the weights' own dtype, no autocast. ``bf16``: bfloat16 autocast for the matmuls
(weights, gradients and optimizer state stay float32; log-softmax, ratios and KL run in float32,
``models.scoring``), and KV caches stored in bfloat16 (attention casts its keys and values to it
anyway, so storing them cast is the same arithmetic at half the memory).

The one home of the precision -> dtype maps: ``PRECISION_DTYPE_NAMES`` (what an engine with its
own weights samples in to compute as the trainer does) and ``DTYPES`` (a dtype's name -> torch's).
"""

from __future__ import annotations

import torch

PRECISIONS = ("fp32", "bf16")
# infra.precision -> the name of the dtype a forward computes in over float32 weights (bf16:
# bfloat16 autocast): engine.dtype's value that samples as the trainer computes
PRECISION_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16"}
# a dtype's name (an export's --dtype, an engine.dtype) -> torch's dtype
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    return precision


def compute_dtype(precision: str, weights: torch.dtype) -> torch.dtype:
    """The dtype activations (and KV caches) hold under ``precision`` for float32 ``weights``;
    weights already in a lower precision keep theirs."""
    if weights == torch.float32:
        return DTYPES[PRECISION_DTYPE_NAMES[check_precision(precision)]]
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
