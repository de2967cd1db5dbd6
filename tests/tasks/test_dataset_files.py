"""What a prompt file that cannot be used is called: a ``.json`` file that is not an array of
records says so (the ``json`` loader reads a lone object as one row, which then failed as "no
eval rows"), and a symlink loop is a symlink loop, not a file that "does not exist"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from astrai.tasks.dataset import DatasetError, DatasetTask, read_rows

ROW = {"prompt": "1+2=", "answer": "3"}


def _task(train: Path) -> DatasetTask:
    return DatasetTask(str(train), None, 0.2, "prompt", "answer", None)


@pytest.mark.parametrize(
    ("content", "held"),
    [
        (ROW, "object"),  # one record, not in an array
        ({"prompt": ["1+2=", "2+2="], "answer": ["3", "4"]}, "object"),  # columns
        ({"data": [ROW]}, "object"),  # records one level down
        ("1+2=", "string"),
    ],
)
def test_a_json_file_that_is_not_an_array_of_records_says_so(
    tmp_path: Path, content: object, held: str
) -> None:
    path = tmp_path / "train.json"
    path.write_text(json.dumps(content, indent=2))
    expected = f"task.train_path: {path} is not an array of records: it holds one JSON {held} ("
    with pytest.raises(DatasetError, match=f"^{re.escape(expected)}"):
        _task(path)


def test_an_array_and_json_lines_in_a_json_file_still_load(tmp_path: Path) -> None:
    array = tmp_path / "array.json"
    array.write_text(json.dumps([ROW, {"prompt": "2+2=", "answer": "4"}]))
    lines = tmp_path / "lines.json"
    lines.write_text("".join(json.dumps(r) + "\n" for r in json.loads(array.read_text())))
    assert read_rows(array, "task.train_path") == read_rows(lines, "task.train_path")
    assert len(read_rows(array, "task.train_path")) == 2


@pytest.mark.parametrize("below", [False, True], ids=["the file", "a folder above it"])
def test_a_symlink_loop_is_named_a_symlink_loop(tmp_path: Path, below: bool) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    path = loop / "train.jsonl" if below else loop
    with pytest.raises(
        DatasetError, match=f"^{re.escape(f'task.train_path: {path}')} is a symlink loop$"
    ):
        _task(path)


def test_a_broken_symlink_names_its_target(tmp_path: Path) -> None:
    link = tmp_path / "train.jsonl"
    link.symlink_to(tmp_path / "gone.jsonl")
    with pytest.raises(
        DatasetError, match=re.escape(f"is a broken symlink (to {tmp_path}/gone.jsonl)")
    ):
        _task(link)


def test_a_missing_file_still_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=re.escape(f"{tmp_path / 'no.jsonl'} does not exist")):
        _task(tmp_path / "no.jsonl")
