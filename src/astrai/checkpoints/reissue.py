"""A checkpoint's re-issuable rollouts (``reissue.pt``, ``train_type.max_policy_lag`` > 0): the
rollouts a stop abandoned before they finished (``astrai.training.sampling.overlap``). The one check
of resume and ``python -m astrai.checkpoints verify``, so ``verify`` OK means resume takes them.

``trainer_state.json`` lists them under ``reissue`` (``[{"step", "policy_version"}]``) and names
the file in its extra files; the file holds ``{"steps": [{"step", "policy_version",
"weights"}]}``: the same steps, in order, right after the checkpoint's in-flight ones, each with
the trainable tensors of the snapshot it samples with (``None`` for an engine with its own
weights). The checkpoint's sampling stream is the one from before the first of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from astrai.checkpoints import io
from astrai.checkpoints.layout import (
    IN_FLIGHT_KEY,
    TRAINER_STATE_FILE,
    CheckpointError,
    recorded_extra_files,
)

REISSUE_KEY = "reissue"
REISSUE_FILE = "reissue.pt"


def check_reissue_file(checkpoint: Path, state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The checked records of ``checkpoint``'s ``reissue.pt`` ([] when ``state`` lists none);
    ``CheckpointError`` naming the file for anything resume could not take."""
    if REISSUE_FILE not in recorded_extra_files(state):
        return []
    file = checkpoint / REISSUE_FILE
    try:
        saved = io.load_torch(file)["steps"]
        jobs = [(int(job["step"]), int(job["policy_version"])) for job in saved]
        listed = [(int(job["step"]), int(job["policy_version"])) for job in state[REISSUE_KEY]]
        first = int(state["step"]) + 1 + int(state.get(IN_FLIGHT_KEY) or 0)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{file}: not the re-issued rollouts it should hold ({err})") from err
    steps = list(range(first, first + len(jobs)))
    if not jobs or jobs != listed or [step for step, _ in jobs] != steps:
        raise CheckpointError(
            f"{file}: re-issued rollouts {jobs} do not match {checkpoint / TRAINER_STATE_FILE} "
            f"({listed}, steps {steps})"
        )
    for job in saved:
        weights = job.get("weights")
        if weights is not None and not (
            isinstance(weights, dict)
            and all(isinstance(t, torch.Tensor) and t.isfinite().all() for t in weights.values())
        ):
            raise CheckpointError(f"{file}: step {job['step']}'s weights are not finite tensors")
    return list(saved)
