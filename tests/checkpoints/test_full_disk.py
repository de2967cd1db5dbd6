"""A full disk while torch writes a checkpoint file is "No space left on device" naming the file
under the checkpoint's final name (``step_<N>/optimizer.pt``), never torch's zip-writer check
("Input/output error ([enforce fail at inline_container.cc:672] ...)") about a temporary path
that no longer exists. The background writer's case: tests/training/test_background_full_disk.py.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tests.checkpoints.full_disk import full_disk_open

from astrai.checkpoints import io
from astrai.cli_errors import error_line

ZIP_WRITER_CHECK = "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"


def test_torch_filling_the_disk_is_no_space_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's real zip writer over a file that fills up: its RuntimeError's context is the
    write's ENOSPC (before: errno EIO, "Input/output error ([enforce fail ...])")."""
    monkeypatch.setattr(io, "open", full_disk_open({"optimizer.pt"}), raising=False)
    path = tmp_path / "optimizer.pt"
    with pytest.raises(OSError) as caught:
        io.save_torch({"w": torch.ones(200_000)}, path)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert "inline_container" in str(caught.value.__cause__)  # what torch itself said
    assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(path))
    assert error_line(caught.value) == f"{path}: No space left on device"


def _statvfs(free_blocks: int) -> object:
    return lambda path: SimpleNamespace(f_bavail=free_blocks, f_frsize=4096)


@pytest.mark.parametrize(("free_blocks", "code"), [(0, errno.ENOSPC), (10**6, errno.EIO)])
def test_without_the_writes_error_the_filesystem_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free_blocks: int, code: int
) -> None:
    """The zip writer's check alone (no ``OSError`` behind it): ENOSPC when the filesystem
    holding the file has no room left (0 blocks free), EIO with torch's words otherwise."""

    def failing_save(payload: object, f: object) -> None:
        raise RuntimeError(ZIP_WRITER_CHECK)

    monkeypatch.setattr(io.torch, "save", failing_save)
    monkeypatch.setattr(io.os, "statvfs", _statvfs(free_blocks))
    path = tmp_path / "optimizer.pt"
    with pytest.raises(OSError) as caught:
        io.save_torch({}, path)
    assert caught.value.errno == code
    expected = "No space left on device" if code == errno.ENOSPC else "Input/output error"
    assert caught.value.strerror.startswith(expected)


def test_a_failed_checkpoint_names_the_final_step_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``write_checkpoint``: a file of the temporary directory (removed on the failure) is named
    under ``step_<N>``; nothing is left of the attempt."""
    monkeypatch.setattr(io, "open", full_disk_open({"optimizer.pt"}), raising=False)
    writers = {
        "trainer_state.json": lambda p: io.save_json({"step": 3}, p),
        "optimizer.pt": lambda p: io.save_torch({"w": torch.ones(200_000)}, p),
    }
    with pytest.raises(OSError) as caught:
        io.write_checkpoint(tmp_path, 3, writers)
    # before: "<tmp>/.step_3.tmp-<pid>-<random>/optimizer.pt: Input/output error (...)"
    assert (
        error_line(caught.value)
        == f"{tmp_path / 'step_3' / 'optimizer.pt'}: No space left on device"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_error_outside_the_temporary_keeps_its_path(tmp_path: Path) -> None:
    """Only a temporary's file is renamed: an error about another path stays as it was."""
    elsewhere = OSError(errno.EACCES, "Permission denied", str(tmp_path / "other" / "x.pt"))

    def failing(path: Path) -> None:
        raise elsewhere

    with pytest.raises(OSError) as caught:
        io.write_checkpoint(tmp_path, 1, {"x.pt": failing})
    assert caught.value.filename == str(tmp_path / "other" / "x.pt")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_real_full_tmpfs(tmp_path: Path) -> None:
    """A 256 KiB tmpfs filled by the checkpoint itself (root only; skipped elsewhere)."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)])
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (a container without CAP_SYS_ADMIN)")
    try:
        writers = {"optimizer.pt": lambda p: io.save_torch({"w": torch.ones(200_000)}, p)}
        with pytest.raises(OSError) as caught:
            io.write_checkpoint(mount, 2, writers)
        assert (
            error_line(caught.value)
            == f"{mount / 'step_2' / 'optimizer.pt'}: No space left on device"
        )
        assert list(mount.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount)], check=True)
