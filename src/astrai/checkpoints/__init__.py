"""Checkpoints: the on-disk layout, atomic writes, safe reads and the ``list/verify/prune`` CLI.

``<run dir>/checkpoints/step_<N>/`` holds exactly N RL steps of training; a directory with that
final name is always complete because it is written under a temporary name and renamed.
"""

from astrai.checkpoints.layout import (
    CHECKPOINTS_DIR,
    REFERENCE_FILE,
    CheckpointError,
    CheckpointInfo,
    checkpoints_root,
    latest_checkpoint,
    list_checkpoints,
    missing_files,
    required_files,
)

__all__ = [
    "CHECKPOINTS_DIR",
    "REFERENCE_FILE",
    "CheckpointError",
    "CheckpointInfo",
    "checkpoints_root",
    "latest_checkpoint",
    "list_checkpoints",
    "missing_files",
    "required_files",
]
