"""Atomic checkpoint directories and reads that name the file when it is unusable."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from astrai.checkpoints.completeness import (
    CheckpointStatus,
    checkpoint_problems,
    scan_checkpoints,
    short_problems,
)
from astrai.checkpoints.layout import (
    ASIDE_MARKER,
    CheckpointError,
    stale_temporaries,
    step_dir_name,
)
from astrai.files import (
    TMP_MARKER,
    FileWriter,
    naming_write_errors,
    temporary_sibling,
    write_files_atomic,
)
from astrai.models.weights import stored_names

log = logging.getLogger(__name__)


def write_checkpoint(root: str | Path, step: int, writers: Mapping[str, FileWriter]) -> Path:
    """Write ``root/step_<step>/`` atomically and return it.

    Each ``writers[name](path)`` writes one file into a temporary sibling directory; the files
    and the directory are fsynced, then the directory is renamed to its final name. A failure
    (or a kill) before the rename leaves at most a temporary that readers ignore; stale
    temporaries are removed before each save. An incomplete ``step_<step>`` already there is
    moved aside first (``set_aside_incomplete``), never merged into or deleted.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(root)
    final = root / step_dir_name(step)
    set_aside_incomplete(final)
    try:
        return write_files_atomic(final, writers)
    except OSError as err:
        raise _naming_final(err, final) from err


def _naming_final(err: OSError, final: Path) -> OSError:
    """``err`` about a file of ``final``'s temporary directory (removed by now) as the same
    error about that file under ``final``'s name: ``step_3/optimizer.pt: No space left on
    device``, the checkpoint the user will look for, not a path that no longer exists."""
    if err.filename is None:
        return err
    path = Path(err.filename)
    temporary = path.parent
    prefix = f".{final.name}{TMP_MARKER}"
    if temporary.parent != final.parent or not temporary.name.startswith(prefix):
        return err
    return OSError(err.errno, err.strerror, str(final / path.name))


def set_aside_incomplete(final: Path) -> Path | None:
    """Rename an incomplete ``final`` (a partial copy or restore of that step) to
    ``step_<N>.incomplete-<time>``, which no reader uses and nothing deletes (it may be the
    user's only copy of something), and log it; return the new name. A complete ``final`` is
    left for the writer to replace whole."""
    if not (final.exists() or final.is_symlink()):
        return None
    problems = checkpoint_problems(final) if final.is_dir() else [f"{final}: not a directory"]
    if not problems:
        return None
    aside = final.with_name(f"{final.name}{ASIDE_MARKER}{time.strftime('%Y%m%dT%H%M%S')}")
    while aside.exists():  # two saves of one step within a second
        aside = aside.with_name(aside.name + "x")
    os.rename(final, aside)
    log.warning(
        "%s was incomplete (%s): moved aside to %s before saving this step",
        final,
        short_problems(problems, final),
        aside.name,
    )
    return aside


def remove_stale_temporaries(root: Path) -> list[Path]:
    removed = stale_temporaries(root)
    for path in removed:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return removed


def prune_checkpoints(
    root: str | Path,
    keep_last: int,
    dry_run: bool = False,
    statuses: list[CheckpointStatus] | None = None,
) -> list[Path]:
    """Delete all but the ``keep_last`` highest-step *complete* checkpoints; return what was (or
    would be) deleted. An incomplete ``step_<N>`` is never counted and never deleted (its files
    may be all that is left of something); ``statuses``: ``scan_checkpoints(root)`` if the
    caller already has it."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 (got {keep_last})")
    statuses = scan_checkpoints(root) if statuses is None else statuses
    doomed = [status.info.path for status in statuses if status.complete][:-keep_last]
    if not dry_run:
        for path in doomed:
            if path.is_symlink():  # a link someone made: remove the link, never its target
                path.unlink()
                continue
            # renamed to a temporary name first: a kill mid-delete leaves a stale temporary
            # (ignored, removed by the next save), never an incomplete step_<N>
            trash = temporary_sibling(path)
            os.rename(path, trash)
            shutil.rmtree(trash)
    return doomed


# --- writers ---------------------------------------------------------------------------------


def module_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """State dict with tied tensors stored once (the first name wins), contiguous, on CPU."""
    state = module.state_dict()
    return {name: state[name].detach().cpu().contiguous() for name in stored_names(module)}


def save_module(module: nn.Module, path: Path) -> None:
    save_tensors(module_tensors(module), path)


def save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """A safetensors file; a failed write (safetensors' own ``SafetensorError`` on a full disk
    included) is an ``OSError`` naming ``path`` (``files.naming_write_errors``)."""
    with naming_write_errors(path):
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))


def save_json(payload: Any, path: Path) -> None:
    with naming_write_errors(path):
        path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def save_torch(payload: Any, path: Path) -> None:
    """``torch.save`` whose write failures are ``OSError``s naming ``path``, so a full disk is
    one line like the safetensors files' (torch's own file writer reports it as a RuntimeError
    without the errno: "PytorchStreamWriter failed writing file ...", "unexpected pos")."""
    try:
        # through a Python file object: a failed write raises OSError with its errno
        with open(path, "wb") as f:
            torch.save(payload, f)
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror or _one_line(err), str(path)) from err
    except RuntimeError as err:
        text = _one_line(err)
        if not any(mark in text for mark in ("PytorchStreamWriter", "inline_container")):
            raise
        code = _zip_writer_errno(err, path)
        # the zip writer's own words ("unexpected pos 704 vs 598") say nothing about a full disk
        cause = os.strerror(code) if code == errno.ENOSPC else f"{os.strerror(code)} ({text})"
        raise OSError(code, cause, str(path)) from err


FULL_DISK_BYTES = 1 << 20  # free space below which a failed write is put down to a full disk


def _zip_writer_errno(err: RuntimeError, path: Path) -> int:
    """What made torch's zip writer fail writing ``path``. On a full disk it reports its own
    check ("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"), the
    file's ``OSError`` (ENOSPC) only as the exception it was handling: that errno if there is
    one, else ENOSPC when the filesystem holding ``path`` has no room left (``os.statvfs``),
    else EIO."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen.errno
        seen = seen.__cause__ or seen.__context__
    if "No space left" in str(err) or "ENOSPC" in str(err):
        return errno.ENOSPC
    try:
        stats = os.statvfs(path.parent)
    except OSError:
        return errno.EIO
    return errno.ENOSPC if stats.f_bavail * stats.f_frsize < FULL_DISK_BYTES else errno.EIO


# --- readers: every failure names the file ---------------------------------------------------


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise CheckpointError(f"{path}: file is missing")


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; an unreadable file or a non-finite value (which would only
    fail later, in sampling) is a ``CheckpointError`` naming the file and the tensor."""
    _require_file(path)
    try:
        tensors = load_file(str(path))
    except Exception as err:
        raise CheckpointError(f"{path}: unreadable safetensors file ({_one_line(err)})") from err
    check_finite(tensors, path)
    return tensors


def check_finite(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Every floating-point tensor holds finite values only."""
    for name in sorted(tensors):
        tensor = tensors[name]
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{path}: tensor {name!r} holds non-finite values (NaN or inf)")


def check_names(tensors: dict[str, torch.Tensor], like: nn.Module, path: Path) -> None:
    """The stored names must be exactly ``like``'s (tied parameters once)."""
    expected = stored_names(like)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not match the model (missing {missing}, unexpected {unexpected})"
        )


def load_module(module: nn.Module, path: Path) -> None:
    """Load safetensors weights into ``module`` (tied parameters stored once)."""
    tensors = load_tensors(path)
    check_names(tensors, module, path)
    try:
        module.load_state_dict(tensors, strict=False)
    except RuntimeError as err:
        raise CheckpointError(f"{path}: weights do not match the model ({err})") from err


def load_json(path: Path) -> Any:
    _require_file(path)
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{path}: unreadable JSON ({err})") from err


def load_torch(path: Path) -> Any:
    """``torch.load(weights_only=True)``: plain tensors and containers only, never pickled code."""
    _require_file(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        problem = _torch_load_problem(err)
        raise CheckpointError(f"{path}: unreadable torch file ({problem})") from err


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


_REFUSED = "holds objects other than tensors and plain containers; refused: loading them runs code"


def _torch_load_problem(err: BaseException) -> str:
    """One line for a failed ``torch.load(weights_only=True)``, without PyTorch's advice to
    retry with weights_only off, which would run whatever code the file holds."""
    text = str(err)
    if "Weights only load failed" not in text:
        return _one_line(err)
    _, _, detail = text.partition("WeightsUnpickler error:")
    detail = " ".join(detail.split())
    for cut in (". Please", " Please", " Check the documentation"):
        detail = detail.split(cut, 1)[0]
    detail = detail.strip(" .")
    if "weights_only" in detail:
        detail = ""
    return f"{_REFUSED} ({detail})" if detail else _REFUSED


def load_state_dict_into(target: Any, path: Path) -> None:
    """``target.load_state_dict(load_torch(path))`` with errors that name the file."""
    state = load_torch(path)
    try:
        target.load_state_dict(state)
    except (KeyError, ValueError, RuntimeError, TypeError) as err:
        raise CheckpointError(f"{path}: does not match this run ({err})") from err
