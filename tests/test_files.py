"""All-or-nothing file-system changes: atomic writes and undoing a fresh directory."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from astrai.files import (
    TMP_MARKER,
    discard_fresh_dir,
    write_dir_atomic,
    write_file_atomic,
    write_files_atomic,
)


def _fail(path: Path) -> None:
    path.write_text("half")
    raise RuntimeError("disk full")


def test_write_file_atomic_replaces_the_file_or_leaves_it_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    write_file_atomic(path, lambda p: p.write_text("one"))
    write_file_atomic(path, lambda p: p.write_text("two"))
    assert path.read_text() == "two"
    with pytest.raises(RuntimeError, match="disk full"):
        write_file_atomic(path, _fail)
    assert path.read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left


def test_write_files_atomic_replaces_a_directory_whole(tmp_path: Path) -> None:
    final = tmp_path / "step_3"
    write_files_atomic(final, {"a.txt": lambda p: p.write_text("old")})
    assert write_files_atomic(final, {"c.txt": lambda p: p.write_text("new")}) == final
    assert sorted(p.name for p in final.iterdir()) == ["c.txt"]
    with pytest.raises(RuntimeError, match="disk full"):
        write_files_atomic(final, {"c.txt": _fail})
    assert (final / "c.txt").read_text() == "new"
    assert not [p for p in tmp_path.iterdir() if TMP_MARKER in p.name]


def test_write_dir_atomic_refuses_an_existing_dir_and_makes_files_readable(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "export"

    def write(tmp: Path) -> None:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "config.json").write_text("{}")
        (tmp / "sub" / "config.json").chmod(0o600)

    write_dir_atomic(out, write)
    assert stat.S_IMODE((out / "sub" / "config.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((out / "sub").stat().st_mode) == 0o755
    with pytest.raises(FileExistsError, match="already exists"):
        write_dir_atomic(out, write)
    with pytest.raises(RuntimeError, match="disk full"):
        write_dir_atomic(tmp_path / "other", lambda tmp: _fail(tmp / "model.safetensors"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nested"]


def test_discard_fresh_dir_removes_only_what_holds_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fresh = tmp_path / "outputs" / "day" / "run"
    (fresh / ".hydra").mkdir(parents=True)
    kept = tmp_path / "outputs" / "other"
    (kept / ".hydra").mkdir(parents=True)
    (kept / "metrics.jsonl").write_text("")

    discard_fresh_dir(kept, {".hydra"})  # holds more than expected: left alone
    assert (kept / "metrics.jsonl").is_file()
    discard_fresh_dir(fresh, {".hydra"})  # and its parent left empty; outputs/ still holds other
    assert not (tmp_path / "outputs" / "day").exists()
    assert kept.is_dir()
    discard_fresh_dir(tmp_path / "missing", {".hydra"})  # nothing there: nothing to do
