"""Is a checkpoint complete, readable and what it says it is? (Used by the CLI.)

``verify`` = the completeness check every other reader runs (``completeness``), plus the deep
checks: every tensor loaded and finite, every torch file loaded with ``weights_only``, and the
identity refusal resume would print (``identity.check_checkpoint_identity``: the step against
its directory name and the ``total_steps`` it was written with).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astrai.checkpoints import io
from astrai.checkpoints.completeness import checkpoint_problems
from astrai.checkpoints.identity import (
    check_checkpoint_identity,
    recorded_total_steps,
    saved_fingerprint,
)
from astrai.checkpoints.layout import (
    REFERENCE_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    CheckpointInfo,
    recorded_extra_files,
    required_files,
)


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
    """``checkpoint_problems`` (for ``train_type``, default: the one recorded in the
    checkpoint), then a full load of every file that passed it, and the identity check."""
    recorded = info.train_type()
    verdict = Verdict(info, train_type or recorded)
    verdict.problems = checkpoint_problems(info.path)
    if train_type is not None and recorded is not None and train_type != recorded:
        # what resume's identity check refuses, said before the files
        verdict.problems.insert(0, f"written by train_type={recorded}, not {train_type}")
    flagged = " ".join(verdict.problems)
    # a file already reported (missing or malformed) is not loaded again
    files = [info.path / name for name in required_files(_recorded_extra_files(info.path))]
    for path in [*files, info.path.parent / REFERENCE_FILE]:
        if path.is_file() and f"{path}:" not in flagged:
            _load(path, verdict)
    _check_identity(verdict)
    if verdict.refusal is not None:  # printed once, as the refusal
        verdict.problems = [p for p in verdict.problems if p != verdict.refusal]
    return verdict


def _load(path: Path, verdict: Verdict) -> None:
    """Read ``path`` whole as resume would; a failure is one more problem."""
    try:
        if path.suffix == ".safetensors":
            io.load_tensors(path)  # also: every value finite
        elif path.suffix == ".pt":
            io.load_torch(path)
    except CheckpointError as err:
        verdict.problems.append(str(err))


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


def _recorded_extra_files(path: Path) -> tuple[str, ...]:
    """The algorithm's files ``path``'s ``trainer_state.json`` lists (none if unreadable)."""
    try:
        state = json.loads((path / TRAINER_STATE_FILE).read_text())
    except (OSError, ValueError):
        return ()
    return recorded_extra_files(state) if isinstance(state, dict) else ()
