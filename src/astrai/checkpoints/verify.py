"""Is a checkpoint complete, readable and what it says it is? (Used by the CLI.)

The identity part (step against directory name and ``total_steps``) is
``identity.check_checkpoint_identity``, the same check resume runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from astrai.checkpoints import io
from astrai.checkpoints.identity import (
    check_checkpoint_identity,
    recorded_total_steps,
    saved_fingerprint,
)
from astrai.checkpoints.layout import (
    MODEL_CONFIG_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    REFERENCE_FILE,
    SCHEDULER_FILE,
    TOKENIZER_FILE,
    TRAINER_STATE_FILE,
    VALUE_MODEL_FILE,
    VALUE_OPTIMIZER_FILE,
    CheckpointError,
    CheckpointInfo,
    missing_files,
)

_TORCH_FILES = (OPTIMIZER_FILE, SCHEDULER_FILE, VALUE_MODEL_FILE, VALUE_OPTIMIZER_FILE)
_JSON_FILES = (MODEL_CONFIG_FILE, TOKENIZER_FILE, TRAINER_STATE_FILE)


@dataclass
class Verdict:
    """What ``verify_checkpoint`` found: no problems means the checkpoint can be resumed."""

    info: CheckpointInfo
    train_type: str | None
    problems: list[str] = field(default_factory=list)
    # the identity check's refusal: the very line resume would print (resume exits 2 on it)
    refusal: str | None = None
    fingerprint: dict[str, Any] | None = None  # None: written before fingerprints were saved

    @property
    def ok(self) -> bool:
        return not self.problems and self.refusal is None


def verify_checkpoint(info: CheckpointInfo, train_type: str | None = None) -> Verdict:
    """Check presence (for ``train_type``, default: the one recorded in the checkpoint) and
    readability of every file, and the run's ``reference.safetensors`` next to it."""
    train_type = train_type or info.train_type()
    verdict = Verdict(info, train_type)
    if train_type is None:
        verdict.problems.append(f"{TRAINER_STATE_FILE} missing or unreadable: train_type unknown")
        train_type = "online_grpo"  # still check the files every train_type needs
    missing = missing_files(info.path, train_type)
    if missing:
        verdict.problems.append(f"missing {', '.join(missing)}")
    present = [name for name in (MODEL_FILE, *_TORCH_FILES, *_JSON_FILES) if name not in missing]
    for name in present:
        path = info.path / name
        if not path.is_file():
            continue
        try:
            if name == MODEL_FILE:
                io.load_tensors(path)
            elif name in _TORCH_FILES:
                io.load_torch(path)
            else:
                io.load_json(path)
        except CheckpointError as err:
            verdict.problems.append(str(err))
    _check_identity(verdict)
    reference = info.path.parent / REFERENCE_FILE
    if not reference.is_file():
        verdict.problems.append(f"{reference}: missing (the run's frozen reference policy)")
    else:
        try:
            io.load_tensors(reference)
        except CheckpointError as err:
            verdict.problems.append(str(err))
    return verdict


def _check_identity(verdict: Verdict) -> None:
    """The step checks of resume, against the total_steps of the run that wrote it."""
    path = verdict.info.path / TRAINER_STATE_FILE
    if not path.is_file():
        return  # already reported as missing
    try:
        state = io.load_json(path)
    except CheckpointError:
        return  # already reported as unreadable
    if isinstance(state, dict):
        fingerprint, complete = saved_fingerprint(state)
        verdict.fingerprint = fingerprint if complete else None
    try:
        total = recorded_total_steps(verdict.info.path, state) if isinstance(state, dict) else None
        check_checkpoint_identity(verdict.info.path, state, total)
    except CheckpointError as err:
        verdict.refusal = str(err)
