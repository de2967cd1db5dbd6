"""Checkpoints: the on-disk layout, atomic writes, safe reads and the ``list/verify/prune`` CLI.

``<run dir>/checkpoints/step_<N>/`` holds exactly N RL steps of training; a directory with that
final name is written under a temporary name and renamed; one that is not complete anyway (a
partial copy or restore) is found by ``completeness.checkpoint_problems``, the one check of list,
prune, retention, resume and verify.
"""

from astrai.checkpoints.completeness import (
    checkpoint_problems,
    complete_checkpoints,
    latest_checkpoint,
    scan_checkpoints,
)
from astrai.checkpoints.layout import (
    CHECKPOINTS_DIR,
    REFERENCE_FILE,
    CheckpointError,
    CheckpointInfo,
    checkpoints_root,
    list_checkpoints,
    missing_files,
    required_files,
)

__all__ = [
    "CHECKPOINTS_DIR",
    "REFERENCE_FILE",
    "CheckpointError",
    "CheckpointInfo",
    "checkpoint_problems",
    "checkpoints_root",
    "complete_checkpoints",
    "latest_checkpoint",
    "list_checkpoints",
    "missing_files",
    "required_files",
    "scan_checkpoints",
]
