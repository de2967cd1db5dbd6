"""A full disk inside the background checkpoint writer (``training.background_save``): the real
writer thread and torch's real zip writer over a file that fills up (tests/checkpoints/
full_disk.py) raise, at the next wait, "No space left on device" naming ``step_<N>/optimizer.pt``
(the audit read "Input/output error ([enforce fail at inline_container.cc:672] ...)" about a
temporary directory already removed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.checkpoints.full_disk import full_disk_open
from tests.helpers import compose_config

from astrai.checkpoints import io
from astrai.checkpoints.completeness import checkpoint_problems
from astrai.cli_errors import error_line
from astrai.training.run import Run


def test_a_full_disk_in_the_background_writer_names_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = Run(compose_config(["debug=quick", "ckpt.every_steps=0"]), tmp_path)
    try:
        trainer.train_step()
        monkeypatch.setattr(io, "open", full_disk_open({"optimizer.pt"}), raising=False)
        path = trainer.save_checkpoint(background=True)
        with pytest.raises(OSError) as caught:
            trainer.wait_for_checkpoint()
        assert path == tmp_path / "checkpoints" / "step_1"
        assert error_line(caught.value) == f"{path / 'optimizer.pt'}: No space left on device"
        # nothing half-written: no step_1, no temporary
        names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
        assert names == ["reference.safetensors"]
        monkeypatch.undo()  # room again: the same save goes through
        assert trainer.save_checkpoint(background=True) == path
        trainer.wait_for_checkpoint()
        assert checkpoint_problems(path) == []
    finally:
        trainer.close()
