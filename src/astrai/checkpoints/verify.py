"""Is a checkpoint complete, readable and what it says it is? (Used by the CLI.)

``verify`` = the completeness check every other reader runs (``completeness``), plus the deep
checks: every tensor loaded and finite, every torch file loaded with ``weights_only``, the
identity refusal resume would print (``identity.check_checkpoint_identity``: the step against
its directory name and the ``total_steps`` it was written with), and the checks of what the
files hold that resume runs (``content_problems``: in-flight rollouts, adapter config, the
base's identity), so ``verify`` OK means resume starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astrai.checkpoints import io
from astrai.checkpoints.completeness import checkpoint_problems
from astrai.checkpoints.identity import (
    adapter_config_problem,
    check_checkpoint_identity,
    recorded_total_steps,
    saved_fingerprint,
)
from astrai.checkpoints.in_flight import RunShape, check_in_flight_file, recorded_shape
from astrai.checkpoints.layout import (
    ADAPTERS_KEY,
    IN_FLIGHT_FILE,
    MODEL_CONFIG_FILE,
    REFERENCE_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    CheckpointInfo,
    recorded_extra_files,
    required_files,
)
from astrai.checkpoints.policy import check_adapter_checkpoint
from astrai.checkpoints.reissue import REISSUE_FILE, check_reissue_file


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
    state = _check_identity(verdict)
    if state is not None and not any(f"{TRAINER_STATE_FILE}:" in p for p in verdict.problems):
        verdict.problems.extend(
            content_problems(info.path, state, flagged=" ".join(verdict.problems), base=True)
        )
    if verdict.refusal is not None:  # printed once, as the refusal
        verdict.problems = [p for p in verdict.problems if p != verdict.refusal]
    return verdict


def content_problems(
    checkpoint: Path,
    state: Mapping[str, Any],
    shape: RunShape | None = None,
    flagged: str = "",
    base: bool = False,
) -> list[str]:
    """What the files hold, checked as resume checks it before it trains (one line each,
    naming the file): the in-flight rollouts against ``trainer_state.json`` and ``shape``
    (None: the run's own ``config.yaml``; ``in_flight.check_in_flight_file``), a LoRA
    checkpoint's ``adapter_config.json`` against its trained state and, with ``base``
    (``verify``; resume compares its own base instead), the recorded base's identity. Files
    already named in ``flagged`` (missing, unreadable) are not read again."""
    problems = []
    in_flight = checkpoint / IN_FLIGHT_FILE
    if IN_FLIGHT_FILE in recorded_extra_files(state) and f"{in_flight}:" not in flagged:
        try:
            check_in_flight_file(checkpoint, state, shape or recorded_shape(checkpoint, state))
        except CheckpointError as err:
            problems.append(str(err))
    if f"{checkpoint / REISSUE_FILE}:" not in flagged:  # rollouts a stop abandoned
        try:
            check_reissue_file(checkpoint, state)
        except CheckpointError as err:
            problems.append(str(err))
    if state.get(ADAPTERS_KEY) is None:
        return problems
    problem = adapter_config_problem(checkpoint, state)
    if problem is not None:
        problems.append(problem)
    elif base and f"{checkpoint / MODEL_CONFIG_FILE}:" not in flagged:
        try:
            check_adapter_checkpoint(checkpoint)
        except CheckpointError as err:
            problems.append(str(err))
    return problems


def _load(path: Path, verdict: Verdict) -> None:
    """Read ``path`` whole as resume would; a failure is one more problem."""
    try:
        if path.suffix == ".safetensors":
            io.load_tensors(path)  # also: every value finite
        elif path.suffix == ".pt":
            io.load_torch(path)
    except CheckpointError as err:
        verdict.problems.append(str(err))


def _check_identity(verdict: Verdict) -> dict[str, Any] | None:
    """The step checks of resume, against the total_steps of the run that wrote it; returns
    the parsed ``trainer_state.json`` (None: missing, unreadable or no object)."""
    path = verdict.info.path / TRAINER_STATE_FILE
    if not path.is_file():
        return None  # already reported as missing
    try:
        state = io.load_json(path)
    except CheckpointError:
        return None  # already reported as unreadable
    if isinstance(state, dict):
        fingerprint, complete = saved_fingerprint(state)
        verdict.fingerprint = fingerprint if complete else None
    try:
        total = recorded_total_steps(verdict.info.path, state) if isinstance(state, dict) else None
        check_checkpoint_identity(verdict.info.path, state, total)
    except CheckpointError as err:
        verdict.refusal = str(err)
    return state if isinstance(state, dict) else None


def _recorded_extra_files(path: Path) -> tuple[str, ...]:
    """The algorithm's files ``path``'s ``trainer_state.json`` lists (none if unreadable)."""
    try:
        state = json.loads((path / TRAINER_STATE_FILE).read_text())
    except (OSError, ValueError):
        return ()
    return recorded_extra_files(state) if isinstance(state, dict) else ()
