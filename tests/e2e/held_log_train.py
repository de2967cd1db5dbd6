"""``python train.py ARGS`` held for good right after it logs the sample panel of step
``ASTRAI_HOLD_STEP`` (``RunLogger.log_samples``, which comes before that step's row), having
written ``ASTRAI_HOLD_MARKER``, so a test can ``kill -9`` it exactly after the row of the step
before. Run as a script (``python tests/e2e/held_log_train.py ARGS``), never imported."""

from __future__ import annotations

import os
import runpy
import sys
import threading
from pathlib import Path

from astrai.metrics.writers import RunLogger

TRAIN = str(Path(__file__).resolve().parents[2] / "train.py")
HOLD_STEP = int(os.environ["ASTRAI_HOLD_STEP"])
MARKER = Path(os.environ["ASTRAI_HOLD_MARKER"])
log_samples = RunLogger.log_samples


def held_log_samples(self: RunLogger, step: int, tag: str, rows: list) -> None:
    log_samples(self, step, tag, rows)
    if step == HOLD_STEP:
        MARKER.write_text(f"held at step {step}\n")
        threading.Event().wait()  # until the test kills the process


RunLogger.log_samples = held_log_samples  # type: ignore[method-assign]
sys.argv = [TRAIN, *sys.argv[1:]]
sys.path[0] = str(Path(TRAIN).parent)  # as `python train.py` has it
runpy.run_path(TRAIN, run_name="__main__")
