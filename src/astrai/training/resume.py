"""Which checkpoint a run resumes from (``ckpt.resume``), checked before anything is loaded or
written: the latest complete one of the run dir (``auto``), a given path, or none (a fresh start
that refuses a run dir holding checkpoints). What it reads to check it, it reads once: the
``ResumePoint`` (its ``trainer_state.json``, its in-flight and re-issued rollouts, checked) is
what the schedules and ``training.checkpointing``'s restore then consume.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from astrai.algorithms.strategy import Strategy
from astrai.checkpoints import io
from astrai.checkpoints.completeness import (
    CheckpointStatus,
    check_state,
    checkpoint_problems,
    latest_complete,
    scan_checkpoints,
    short_problems,
)
from astrai.checkpoints.identity import adapter_config_problem
from astrai.checkpoints.in_flight import RunShape, check_in_flight_object, recorded_shape
from astrai.checkpoints.layout import (
    ADAPTER_FILES,
    ADAPTERS_KEY,
    CHECKPOINTS_DIR,
    EXTRA_FILES_KEY,
    IN_FLIGHT_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    CheckpointInfo,
    list_checkpoints,
    missing_files,
    recorded_extra_files,
    required_files,
)
from astrai.checkpoints.reissue import check_reissue_file
from astrai.metrics.writers import METRICS_FILE, MetricsFileError, read_metrics_for_resume
from astrai.paths import missing_reason

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResumePoint:
    """A checkpoint to resume, read and checked once (``resolve_resume``).

    Attributes:
        path: its directory.
        record: its ``trainer_state.json``, checked (``completeness.check_state``).
        in_flight: its ``in_flight.pt`` as loaded and checked against the record (None: it
            holds none); the restore checks it against this run's batch before taking it.
        reissue: the records of its ``reissue.pt``, checked ([]: none).
    """

    path: Path
    record: dict[str, Any]
    in_flight: Any = None
    reissue: tuple[dict[str, Any], ...] = ()


def resolve_resume(
    resume: str | None,
    run_dir: Path,
    strategy: type[Strategy] | Strategy,
    adapters: bool = False,
    shape: RunShape | None = None,
) -> ResumePoint | None:
    """``ckpt.resume`` -> the checkpoint to restore, read and checked, or None to start fresh.

    ``auto`` picks the latest *complete* checkpoint of ``run_dir`` (``completeness``, the check
    list, prune and retention use), warning in one line about each newer incomplete one it
    skips; None if the run dir holds no ``step_<N>`` at all. A path must be a complete
    checkpoint directory. ``None`` never resumes — and refuses a run dir that already holds
    checkpoints, whose retention would otherwise prune the new run's checkpoints in favour of
    the old run's higher steps. The chosen checkpoint must hold every file ``train_type`` needs;
    the error names the missing ones (the strategy's ``checkpoint_files`` among them).
    ``adapters``: this run trains LoRA adapters (``model.lora``); a checkpoint of the other
    kind is refused in one line before its files are checked. Last, what the files hold
    (``check_contents``, with ``shape``: this run's batch), as ``verify`` checks it.
    """
    train_type = strategy.name
    if resume is None:
        existing = list_checkpoints(run_dir / CHECKPOINTS_DIR)
        if existing:
            raise CheckpointError(
                f"ckpt.resume=null but {run_dir} already holds checkpoints (latest "
                f"{existing[-1].path.name}); resume with ckpt.resume=auto or use a new "
                f"hydra.run.dir"
            )
        return None
    if resume == "auto":
        path = _latest_complete(run_dir / CHECKPOINTS_DIR)
        if path is None:
            return None
    else:
        path = Path(resume).expanduser()
        if not path.is_dir():
            # a path that is there (a file) is no directory; one that is not says why
            why = "" if path.exists() else f" ({path} {missing_reason(path)})"
            raise CheckpointError(f"ckpt.resume: no checkpoint directory at {path}{why}")
    check_metrics_for_resume(run_dir)
    record = _read_record(path)  # None: unreadable, which ``checkpoint_problems`` names
    check_adapter_kind(path, record, adapters)
    expected = [*(ADAPTER_FILES if adapters else ()), *_expected_extra_files(strategy, record)]
    missing = missing_files(path, required_files(expected))
    if missing:
        recorded = CheckpointInfo(0, path).train_type()
        written_by = (
            f" (written by train_type={recorded})" if recorded not in (None, train_type) else ""
        )
        raise CheckpointError(
            f"{path}: incomplete checkpoint for {train_type}: missing {', '.join(missing)}"
            f"{written_by}"
        )
    problems = checkpoint_problems(path)
    if len(problems) == 1 and str(path) in problems[0]:
        raise CheckpointError(problems[0])  # already one line naming the file: verify's line
    if problems:
        raise CheckpointError(f"{path}: incomplete checkpoint: {short_problems(problems, path)}")
    assert record is not None  # readable: ``checkpoint_problems`` found nothing
    check_state(record, path / TRAINER_STATE_FILE)
    return read_contents(path, record, shape)


def _read_record(path: Path) -> dict[str, Any] | None:
    """``path``'s ``trainer_state.json``; None when it is unreadable or not an object."""
    try:
        record = io.load_json(path / TRAINER_STATE_FILE)
    except CheckpointError:
        return None
    return record if isinstance(record, dict) else None


def read_contents(path: Path, record: dict[str, Any], shape: RunShape | None) -> ResumePoint:
    """What a complete checkpoint's files hold, loaded once and checked as ``verify`` checks
    them (``verify.content_problems``, in its order: in-flight rollouts, re-issued ones, a
    LoRA checkpoint's adapter config), the first problem a one-line ``CheckpointError``.
    ``shape``: this run's batch (None: the one the checkpoint's run sampled; the restore checks
    this run's). The base's identity is compared at restore, against this run's base
    (``identity.check_fingerprint``)."""
    in_flight = None
    if IN_FLIGHT_FILE in recorded_extra_files(record):
        file = path / IN_FLIGHT_FILE
        in_flight = io.load_torch(file)
        check_in_flight_object(in_flight, record, file, shape or recorded_shape(path, record))
    reissue = tuple(check_reissue_file(path, record))
    if record.get(ADAPTERS_KEY) is not None:
        problem = adapter_config_problem(path, record)
        if problem is not None:
            raise CheckpointError(problem)
    return ResumePoint(path, record, in_flight, reissue)


def check_adapter_kind(path: Path, record: dict[str, Any] | None, adapters: bool) -> None:
    """Refuse, in one line, a full fine-tuning checkpoint for a LoRA run and the reverse (an
    unreadable ``trainer_state.json``, ``record`` None, is left to ``checkpoint_problems``)."""
    if record is None:
        return
    saved = record.get(ADAPTERS_KEY)
    if adapters and saved is None:
        raise CheckpointError(
            f"{path}: a full fine-tuning checkpoint (whole weights, no adapters) cannot be "
            "resumed with model.lora: resume it without model.lora, or train adapters in a new "
            "run dir (hydra.run.dir=...)"
        )
    if not adapters and saved is not None:
        lora = saved.get("lora", {}) if isinstance(saved, dict) else {}
        raise CheckpointError(
            f"{path}: a LoRA checkpoint (adapters of rank {lora.get('rank')}) cannot be "
            "resumed as full fine-tuning: set model.lora as the run had it "
            f"(model.lora.rank={lora.get('rank')} ...), or use a new run dir"
        )


def _expected_extra_files(
    strategy: type[Strategy] | Strategy, record: dict[str, Any] | None
) -> Sequence[str]:
    """The strategy's ``checkpoint_files``; for a format-1 checkpoint it wrote (which listed
    none), the files format 1 had (PPO's critic had no schedule file yet). ``record`` None:
    unreadable, ``checkpoint_problems`` says why."""
    if record is not None and EXTRA_FILES_KEY not in record:
        if record.get("train_type") == strategy.name:
            return recorded_extra_files(record)
    return strategy.checkpoint_files


def _latest_complete(root: Path) -> Path | None:
    """``ckpt.resume=auto``'s choice: the latest complete checkpoint under ``root``; None when
    there is no ``step_<N>`` at all. Only incomplete ones is a ``CheckpointError``: starting
    fresh beside them would let retention delete the new run's checkpoints for their steps."""
    statuses = scan_checkpoints(root)
    chosen = latest_complete(statuses)
    if chosen is None:
        if statuses:
            raise CheckpointError(
                f"ckpt.resume=auto: no complete checkpoint in {root}: {_describe(statuses)} "
                f"(repair or remove them, or use a new hydra.run.dir)"
            )
        return None
    skipped = [status for status in statuses if status.info.step > chosen.step]
    if skipped:
        log.warning(
            "ckpt.resume=auto: skipped newer incomplete checkpoint(s) %s; resuming from %s",
            _describe(skipped),
            chosen.path.name,
        )
    return chosen.path


def _describe(statuses: list[CheckpointStatus]) -> str:
    return ", ".join(f"{s.info.path.name} ({s.describe()})" for s in statuses)


def check_metrics_for_resume(run_dir: Path) -> None:
    """The run dir's ``metrics.jsonl`` is one a resume can truncate at its step: a malformed
    row is a one-line ``CheckpointError`` before anything is written."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return
    try:
        read_metrics_for_resume(path)
    except MetricsFileError as err:
        raise CheckpointError(str(err)) from err
    except OSError as err:
        raise CheckpointError(f"{path}: unreadable ({err.strerror or err})") from err
