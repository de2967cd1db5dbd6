"""What names and identifies a run in W&B and MLflow: its display name, its sweep group, the
backend's run id kept in the run dir, so a resumed run continues the same record, and the last
step handed to them (``tracked_step``), so a resume knows whether they hold steps after its
checkpoint."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from astrai.files import temporary_sibling, write_file_atomic
from astrai.metrics.dashboards import tensorboard_run_name


def display_name(run_dir: Path) -> str:
    """A sweep job's swept overrides (``ppo_gamma=0.95,ppo_gae_lambda=0.9``, as TensorBoard
    names the job's run), else the run dir's name (``12-00-00``)."""
    return tensorboard_run_name() or run_dir.resolve().name


def sweep_group() -> str | None:
    """The sweep dir's name for a job of a Hydra multirun (its jobs group together); None for
    a single run."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return Path(str(hydra_cfg.sweep.dir)).resolve().name


def read_run_id(path: Path) -> str | None:
    """The id stored at ``path`` (``<run dir>/wandb_run_id``...); None when absent or empty."""
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8").strip() or None


def write_run_id(path: Path, run_id: str) -> None:
    """Store ``run_id`` at ``path`` (atomically: a resume never reads half an id)."""

    def write(tmp: Path) -> None:
        tmp.write_text(run_id + "\n", encoding="utf-8")

    write_file_atomic(path, write)


TRACKED_STEP_FILE = "tracked_step"
CLOSED = "closed"  # after the step: the trackers were closed (finished) after it


@dataclass(frozen=True)
class TrackedStep:
    """The last step handed to the trackers (W&B, MLflow), and whether they were closed after
    it (a run that stopped; a killed one never closes them)."""

    step: int
    closed: bool = False


def read_tracked_step(run_dir: Path) -> TrackedStep | None:
    """What ``write_tracked_step`` kept; None when nothing was, or the file is not one."""
    try:
        step, _, state = (run_dir / TRACKED_STEP_FILE).read_text(encoding="utf-8").partition(" ")
        return TrackedStep(int(step), state.strip() == CLOSED)
    except (OSError, ValueError):
        return None


def write_tracked_step(run_dir: Path, step: int, closed: bool = False) -> None:
    """Keep ``step`` as the last step handed to the trackers, before they get it; ``closed``:
    once they were closed after it. Renamed into place, not fsynced (once a step): a killed
    process leaves the old or the new value, and what a machine crash loses, the trackers'
    own buffers lose too."""
    path = run_dir / TRACKED_STEP_FILE
    tmp = temporary_sibling(path)
    try:
        tmp.write_text(f"{step}{' ' + CLOSED if closed else ''}\n", encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
