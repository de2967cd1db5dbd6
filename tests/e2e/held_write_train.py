"""``python train.py ARGS`` with one checkpoint's background write held mid-write, for
``test_background_save_kill.py``: the write of ``step_<ASTRAI_HOLD_STEP>``'s ``optimizer.pt``
(after its ``model.safetensors``) puts half the file on disk, writes the path into the file
``ASTRAI_HOLD_MARKER`` and blocks for good, so the test can ``kill -9`` the process exactly
there. Run as a script (``python tests/e2e/held_write_train.py ARGS``), never imported."""

from __future__ import annotations

import io as bytes_io
import os
import runpy
import sys
import threading
from pathlib import Path

from astrai.checkpoints import io

TRAIN = str(Path(__file__).resolve().parents[2] / "train.py")
HELD = f".step_{os.environ['ASTRAI_HOLD_STEP']}.tmp-"
MARKER = Path(os.environ["ASTRAI_HOLD_MARKER"])
save_torch = io.save_torch


def held_save_torch(payload: object, path: Path) -> None:
    if not (path.parent.name.startswith(HELD) and path.name == "optimizer.pt"):
        save_torch(payload, path)
        return
    import torch

    whole = bytes_io.BytesIO()
    torch.save(payload, whole)
    with open(path, "wb") as f:  # half of the file, on disk
        f.write(whole.getvalue()[: len(whole.getvalue()) // 2])
    MARKER.write_text(f"{threading.current_thread().name} {path}\n")
    threading.Event().wait()  # until the test kills the process


io.save_torch = held_save_torch
sys.argv = [TRAIN, *sys.argv[1:]]
sys.path[0] = str(Path(TRAIN).parent)  # as `python train.py` has it (custom rewards in tests/)
runpy.run_path(TRAIN, run_name="__main__")
