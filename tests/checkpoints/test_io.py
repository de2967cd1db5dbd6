"""Atomic checkpoint directories, safe reads and retention."""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest
import torch
from tests.checkpoints.checkpoint_dirs import write_checkpoint as write_complete_checkpoint
from torch import nn

from astrai.checkpoints import io
from astrai.checkpoints.layout import (
    CheckpointError,
    list_checkpoints,
    stale_temporaries,
)
from astrai.files import FileWriter


def _writers(value: str) -> dict[str, FileWriter]:
    return {
        "a.txt": lambda p: p.write_text(value),
        "b.txt": lambda p: p.write_text(value * 2),
    }


def test_write_checkpoint_creates_the_final_directory_with_every_file(tmp_path: Path) -> None:
    path = io.write_checkpoint(tmp_path, 7, _writers("x"))
    assert path == tmp_path / "step_7"
    assert (path / "a.txt").read_text() == "x" and (path / "b.txt").read_text() == "xx"
    assert stale_temporaries(tmp_path) == []


def test_a_save_interrupted_after_the_first_file_is_never_picked(tmp_path: Path) -> None:
    io.write_checkpoint(tmp_path, 2, _writers("old"))

    def explode(path: Path) -> None:
        raise RuntimeError("disk full")

    writers = {"a.txt": _writers("new")["a.txt"], "b.txt": explode}
    with pytest.raises(RuntimeError, match="disk full"):
        io.write_checkpoint(tmp_path, 4, writers)
    assert not (tmp_path / "step_4").exists()
    assert [info.step for info in list_checkpoints(tmp_path)] == [2]
    assert (tmp_path / "step_2" / "a.txt").read_text() == "old"


def test_a_killed_save_leaves_a_temporary_that_is_ignored_then_cleaned(tmp_path: Path) -> None:
    io.write_checkpoint(tmp_path, 2, _writers("old"))
    # what a SIGKILL during a save leaves: a half-written temporary directory
    partial = tmp_path / ".step_4.tmp-12345-deadbeef"
    partial.mkdir()
    (partial / "a.txt").write_text("half")
    assert [info.step for info in list_checkpoints(tmp_path)] == [2]
    assert stale_temporaries(tmp_path) == [partial]
    io.write_checkpoint(tmp_path, 3, _writers("next"))
    assert not partial.exists()
    assert [info.step for info in list_checkpoints(tmp_path)] == [2, 3]


def test_list_orders_by_step_numerically_and_skips_other_names(tmp_path: Path) -> None:
    for step in (10, 2, 100):
        io.write_checkpoint(tmp_path, step, _writers("x"))
    (tmp_path / "step_x").mkdir()
    (tmp_path / "reference.safetensors").write_bytes(b"")
    assert [info.step for info in list_checkpoints(tmp_path)] == [2, 10, 100]


def test_prune_keeps_the_newest_and_dry_run_deletes_nothing(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        write_complete_checkpoint(tmp_path, step)
    would = io.prune_checkpoints(tmp_path, keep_last=2, dry_run=True)
    assert [p.name for p in would] == ["step_1", "step_2"]
    assert len(list_checkpoints(tmp_path)) == 4
    io.prune_checkpoints(tmp_path, keep_last=2)
    assert [info.step for info in list_checkpoints(tmp_path)] == [3, 4]
    with pytest.raises(ValueError, match="keep_last"):
        io.prune_checkpoints(tmp_path, keep_last=0)


def test_module_round_trip_with_tied_weights(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight  # tied, as with tie_word_embeddings
    io.save_module(model, tmp_path / "m.safetensors")
    other = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    other[1].weight = other[0].weight
    io.load_module(other, tmp_path / "m.safetensors")
    assert torch.equal(other[0].weight, model[0].weight)
    assert other[1].weight is other[0].weight


def test_loading_weights_of_another_shape_names_the_file(tmp_path: Path) -> None:
    io.save_module(nn.Linear(3, 2), tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match=r"m\.safetensors: weights do not match"):
        io.load_module(nn.Linear(4, 2), tmp_path / "m.safetensors")


@pytest.mark.parametrize(
    ("name", "content", "loader", "needle"),
    [
        ("state.json", b'{"step": 3', io.load_json, "unreadable JSON"),
        ("optimizer.pt", b"\x80\x02garbage", io.load_torch, "unreadable torch file"),
        ("model.safetensors", b"\x00\x01", io.load_tensors, "unreadable safetensors"),
    ],
)
def test_corrupt_files_are_named(tmp_path: Path, name: str, content: bytes, loader, needle) -> None:  # noqa: ANN001
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as err:
        loader(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"value_model\.pt: file is missing"):
        io.load_torch(tmp_path / "value_model.pt")


class _Payload:
    """Unpickling this would run code chosen by whoever wrote the file."""

    def __reduce__(self):  # noqa: ANN204
        return (os.getcwd, ())


def test_torch_files_load_with_weights_only(tmp_path: Path) -> None:
    path = tmp_path / "optimizer.pt"
    with open(path, "wb") as f:
        pickle.dump({"state": _Payload()}, f, protocol=2)
    with pytest.raises(CheckpointError, match=r"optimizer\.pt: unreadable torch file"):
        io.load_torch(path)
    torch.save({"step": torch.tensor(3.0), "lr": [1e-3]}, path)
    assert io.load_torch(path)["lr"] == [1e-3]


# --- a full disk inside torch.save ----------------------------------------------------------


def test_a_full_disk_in_torch_save_is_an_oserror_naming_the_file(tmp_path: Path) -> None:
    """/dev/full: every write fails with ENOSPC, as on a full disk (torch's own file writer
    said "unexpected pos 704 vs 598", a RuntimeError, and train.py printed 56 lines)."""
    full = Path("/dev/full")
    if not full.exists():
        pytest.skip("no /dev/full")
    with pytest.raises(OSError) as err:
        io.save_torch({"w": torch.ones(1000)}, full)
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(full))
    assert err.value.strerror == "No space left on device"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("PytorchStreamWriter failed writing file data/0: file write failed", errno.EIO),
        ("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598", errno.EIO),
        ("PytorchStreamWriter failed writing file: No space left on device", errno.ENOSPC),
    ],
)
def test_torch_writer_failures_become_oserrors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, code: int
) -> None:
    failure = RuntimeError(text)

    def failing_save(payload: object, f: object) -> None:
        raise failure

    monkeypatch.setattr(io.torch, "save", failing_save)
    path = tmp_path / "optimizer.pt"
    with pytest.raises(OSError) as err:
        io.save_torch({}, path)
    assert (err.value.errno, err.value.filename) == (code, str(path))
    # a full disk in plain words (tests/checkpoints/test_full_disk.py); torch's own otherwise
    expected = os.strerror(code) if code == errno.ENOSPC else f"{os.strerror(code)} ({text})"
    assert err.value.strerror == expected
    assert err.value.__cause__ is failure

    def unpicklable(payload: object, f: object) -> None:
        raise RuntimeError("cannot pickle 'generator' object")

    # anything else torch.save raises is not a disk problem and goes through unchanged
    monkeypatch.setattr(io.torch, "save", unpicklable)
    with pytest.raises(RuntimeError, match="cannot pickle"):
        io.save_torch({}, path)
