"""Is a ``step_<N>`` directory a complete checkpoint? The one answer of ``list``, ``prune``,
``ckpt.keep_last`` retention, ``ckpt.resume``, ``generate``/``export`` of a run dir and
``verify``, so none of them can disagree with another.

Cheap enough to run over every checkpoint at each save (no tensor is loaded): the
``trainer_state.json`` fields a restore reads, every file ``required_files`` names, the
structure of each (a safetensors header that parses and ends where the file ends, a torch
file's zip central directory, JSON and YAML that parse) and the run's ``reference.safetensors``
beside the step directories. ``verify`` adds the deep checks (full tensor loads, finite
values, the identity refusal) on top of this one.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from astrai.checkpoints.identity import check_step
from astrai.checkpoints.layout import (
    EXTRA_FILES_KEY,
    IN_FLIGHT_FILE,
    IN_FLIGHT_KEY,
    REFERENCE_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    CheckpointInfo,
    checkpoints_root,
    holds_adapters,
    list_checkpoints,
    recorded_extra_files,
    required_files,
)

# the fields a restore reads beyond the step (checked by ``identity.check_step``)
_STATE_FIELDS: dict[str, type] = {
    "train_type": str,
    "policy_version": int,
    "initial_metrics": dict,
    "rng": dict,
}


def state_problems(state: Any, path: Path) -> list[str]:
    """What is wrong with a parsed ``trainer_state.json`` at ``path`` (the file) for a restore:
    one line per problem, each naming the file and the key."""
    if not isinstance(state, Mapping):
        return [f"{path}: expected a JSON object"]
    problems = []
    try:
        check_step(path.parent, state, None)
    except CheckpointError as err:
        problems.append(str(err))
    for key, kind in _STATE_FIELDS.items():
        value = state.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            problems.append(f"{path}: missing or invalid {key!r}")
    if not isinstance(state.get("eval_pending", False), bool):  # absent before it was saved
        problems.append(f"{path}: invalid 'eval_pending' (true or false)")
    per_rank = state.get("rng_per_rank")
    if per_rank is not None and not (
        isinstance(per_rank, list) and all(isinstance(rng, dict) for rng in per_rank)
    ):
        problems.append(f"{path}: invalid 'rng_per_rank' (a list of RNG states)")
    extra = state.get(EXTRA_FILES_KEY)
    if extra is not None and not (
        isinstance(extra, list) and all(isinstance(n, str) and "/" not in n for n in extra)
    ):
        problems.append(f"{path}: invalid {EXTRA_FILES_KEY!r} (a list of file names)")
    problems.extend(_in_flight_count_problems(state, path))
    fingerprint = state.get("fingerprint")
    recorded = fingerprint.get("train_type") if isinstance(fingerprint, dict) else None
    train_type = state.get("train_type")
    if isinstance(train_type, str) and recorded is not None and recorded != train_type:
        # which one is true is unknowable: the critic files, resume and verify would each
        # believe a different one
        problems.append(
            f"{path}: train_type {train_type!r} contradicts its "
            f"fingerprint's train_type {recorded!r}"
        )
    return problems


def _in_flight_count_problems(state: Mapping[str, Any], path: Path) -> list[str]:
    """The ``in_flight`` count and the ``in_flight.pt`` listing come together: a count without
    the file would resume by sampling those steps afresh (not the run it continues)."""
    count = state.get(IN_FLIGHT_KEY)
    listed = IN_FLIGHT_FILE in recorded_extra_files(state)
    valid = isinstance(count, int) and not isinstance(count, bool) and count >= 1
    if count is not None and not valid:
        return [f"{path}: invalid {IN_FLIGHT_KEY!r} ({count!r}; a count >= 1)"]
    if valid and not listed:
        return [f"{path}: counts {count} in-flight rollout(s) but lists no {IN_FLIGHT_FILE}"]
    if listed and count is None:
        return [f"{path}: lists {IN_FLIGHT_FILE} but no {IN_FLIGHT_KEY!r} count"]
    return []


def check_state(state: Any, path: Path) -> None:
    """Raise the first of ``state_problems`` as a ``CheckpointError`` (restore's check)."""
    problems = state_problems(state, path)
    if problems:
        raise CheckpointError(problems[0])


def _read_state(checkpoint: Path) -> tuple[Any, list[str]]:
    """(parsed trainer_state.json or None, its problems); a missing file is no problem here
    (``missing_files`` names it)."""
    path = checkpoint / TRAINER_STATE_FILE
    if not path.is_file():
        return None, []
    problem = file_problem(path)
    if problem is not None:
        return None, [problem]
    state = json.loads(path.read_text())
    return state, state_problems(state, path)


def checkpoint_problems(path: Path, extra_files: Sequence[str] | None = None) -> list[str]:
    """Why ``path`` is not a complete checkpoint (empty: it is), one line per problem.

    Args:
        path: a ``step_<N>`` directory (its N must equal the recorded step).
        extra_files: the algorithm's files to require beyond ``COMMON_FILES`` (a resuming
            strategy's ``checkpoint_files``); None: those the checkpoint records.
    """
    path = Path(path)
    if not path.is_dir():
        return [f"{path}: not a directory"]
    state, problems = _read_state(path)
    if extra_files is None:  # an unreadable trainer_state.json: the files every run needs
        extra_files = recorded_extra_files(state) if isinstance(state, Mapping) else ()
    names = required_files(extra_files)
    missing = [name for name in names if not (path / name).is_file()]
    if missing:
        problems.insert(0, f"missing {', '.join(missing)}")
    for name in names:
        if name != TRAINER_STATE_FILE and name not in missing:
            problem = file_problem(path / name)
            if problem is not None:
                problems.append(problem)
    reference = path.parent / REFERENCE_FILE
    if holds_adapters(extra_files):  # the reference is the base model, read from model.path
        return problems
    if not reference.is_file():
        problems.append(f"{reference}: missing (the run's frozen reference policy)")
    else:
        problem = file_problem(reference)
        if problem is not None:
            problems.append(problem)
    return problems


def short_problems(problems: list[str], path: Path) -> str:
    """``problems`` on one line, file names relative to the checkpoint ``path`` (for lines that
    already name it)."""
    prefix, parent = f"{path}/", f"{path.parent}/"
    return "; ".join(p.replace(prefix, "").replace(parent, "../") for p in problems)


# --- cheap structural checks of one file --------------------------------------------------------


def file_problem(path: Path) -> str | None:
    """A one-line problem with the structure of ``path`` (by its suffix), or None.

    Reads headers and directories only: a safetensors file's header must parse and end where
    the file ends, a torch file must have a zip central directory (a truncated one loses it),
    JSON and YAML must parse.
    """
    try:
        if path.suffix == ".safetensors":
            return _safetensors_problem(path)
        if path.suffix == ".pt":
            return _torch_problem(path)
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix in (".yaml", ".yml"):
            if not isinstance(yaml.safe_load(path.read_text()), dict):
                return f"{path}: unreadable YAML (not a mapping)"
    except OSError as err:
        return f"{path}: unreadable ({err.strerror or err})"
    except (UnicodeDecodeError, ValueError) as err:
        return f"{path}: unreadable JSON ({err})"
    except yaml.YAMLError as err:
        return f"{path}: unreadable YAML ({' '.join(str(err).split())})"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """The header (8-byte little-endian length, then JSON) parses and its last tensor ends
    exactly at the end of the file."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 0 or 8 + length > size:
            return f"{path}: unreadable safetensors file (truncated header, {size} bytes)"
        try:
            header = json.loads(f.read(length))
            ends = [
                int(entry["data_offsets"][1])
                for name, entry in header.items()
                if name != "__metadata__"
            ]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
            return f"{path}: unreadable safetensors file (bad header: {err})"
    expected = 8 + length + max(ends, default=0)
    if size != expected:
        return (
            f"{path}: unreadable safetensors file ({size} bytes, its header says {expected}: "
            f"{'truncated' if size < expected else 'trailing bytes'})"
        )
    return None


def _torch_problem(path: Path) -> str | None:
    """``torch.save`` writes a zip archive; its central directory sits at the end of the file,
    so a truncated file has none."""
    try:
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, EOFError, ValueError) as err:
        return f"{path}: unreadable torch file (no complete zip archive: {err}; truncated?)"
    return None


# --- every checkpoint of a run ------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointStatus:
    """One ``step_<N>`` directory and why it is incomplete (empty: complete)."""

    info: CheckpointInfo
    problems: list[str]

    @property
    def complete(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """``complete`` or ``incomplete: <reasons>`` (file names relative to the directory)."""
        if self.complete:
            return "complete"
        return f"incomplete: {short_problems(self.problems, self.info.path)}"


def scan_checkpoints(root: str | Path) -> list[CheckpointStatus]:
    """Every ``step_<N>`` directory under ``root`` (a run dir or its checkpoints folder) by
    step, with its completeness."""
    return [
        CheckpointStatus(info, checkpoint_problems(info.path))
        for info in list_checkpoints(checkpoints_root(root))
    ]


def complete_checkpoints(root: str | Path) -> list[CheckpointInfo]:
    """The complete checkpoints under ``root``, by step."""
    return [status.info for status in scan_checkpoints(root) if status.complete]


def latest_complete(statuses: list[CheckpointStatus]) -> CheckpointInfo | None:
    """The highest-step complete checkpoint of a ``scan_checkpoints`` result; None when none
    is complete (callers that also report the incomplete ones scan once and ask this)."""
    return next((status.info for status in reversed(statuses) if status.complete), None)


def latest_checkpoint(root: str | Path) -> CheckpointInfo | None:
    """The highest-step *complete* checkpoint under ``root`` (a run dir or its checkpoints
    folder); None when there is none."""
    return latest_complete(scan_checkpoints(root))
