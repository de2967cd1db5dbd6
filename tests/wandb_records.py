"""Reading back what W&B wrote offline: the records of a run's ``run-<id>.wandb`` file.

wandb 0.31 no longer ships a Python reader (``wandb.sdk.internal.datastore`` went with the move
of its internals to ``wandb-core``), so the file's framing is read here: LevelDB's log format
as W&B writes it (a 7-byte header ``:W&B``, magic 0xBEE1, version 0; 32 KiB blocks of records,
each with a 7-byte header: CRC-32 of type and data, length, type FULL/FIRST/MIDDLE/LAST; a
block's last < 7 bytes are padding). Each record is W&B's own protobuf
``wandb.proto.wandb_internal_pb2.Record``, checked against its CRC.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from wandb.proto import wandb_internal_pb2

FILE_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
RECORD_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> Iterator[wandb_internal_pb2.Record]:
    """The records of a ``.wandb`` file, in order."""
    data = path.read_bytes()
    assert data[: len(FILE_HEADER)] == FILE_HEADER, f"{path}: not a W&B transaction log"
    pos, parts = len(FILE_HEADER), []
    while pos + RECORD_HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < RECORD_HEADER:  # the block's trailer
            pos += room
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos : pos + RECORD_HEADER])
        if kind == 0 and length == 0:  # zero padding to the end of the block (or file)
            pos += room
            continue
        payload = data[pos + RECORD_HEADER : pos + RECORD_HEADER + length]
        assert zlib.crc32(payload, zlib.crc32(bytes([kind]))) == checksum, f"{path}: bad CRC"
        pos += RECORD_HEADER + length
        parts.append(payload)
        if kind in (FULL, LAST):
            yield wandb_internal_pb2.Record.FromString(b"".join(parts))
            parts = []


def run_files(wandb_dir: Path) -> list[Path]:
    """The ``run-<id>.wandb`` files under ``<dir>/wandb/``, oldest first (one per start)."""
    return sorted(wandb_dir.glob("offline-run-*/run-*.wandb"))


def run_id(path: Path) -> str:
    """The W&B run id the file's run record names."""
    runs = [r.run.run_id for r in read_records(path) if r.WhichOneof("record_type") == "run"]
    assert runs, f"{path}: no run record"
    return runs[0]


def _history(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    """``(step, {key: value})`` of each history record; a logged object (a table) is one key
    whose value is the dict of its fields (W&B writes them as nested keys)."""
    for record in read_records(path):
        if record.WhichOneof("record_type") != "history":
            continue
        items: dict[str, object] = {}
        for item in record.history.item:
            key, *field = [item.key] if item.key else list(item.nested_key)
            value = json.loads(item.value_json)
            if field:
                cast(dict, items.setdefault(key, {}))[field[0]] = value
            else:
                items[key] = value
        yield int(cast(int, items.pop("_step"))), items


def history_rows(path: Path) -> dict[int, dict[str, float]]:
    """The file's history as ``{step: {metric: value}}``: the numeric items of each history
    record (W&B's own ``_timestamp``/``_runtime`` and tables left out), NaN as W&B writes it
    (``NaN``) read back as float NaN; rows of one step merged."""
    rows: dict[int, dict[str, float]] = {}
    for step, items in _history(path):
        row = rows.setdefault(step, {})
        for key, value in items.items():
            if not key.startswith("_") and isinstance(value, int | float):
                row[key] = float(value)
    return rows


def history_tables(path: Path) -> dict[tuple[int, str], dict]:
    """The tables of the file's history, ``{(step, key): {"columns": [...], "data": [...]}}``,
    read from the run's ``files/`` folder."""
    tables = {}
    for step, items in _history(path):
        for key, value in items.items():
            if isinstance(value, dict) and value.get("_type") == "table-file":
                table_file = path.parent / "files" / str(value["path"])
                tables[step, key] = json.loads(table_file.read_text())
    return tables


def same_value(a: float, b: float) -> bool:
    """Equal, NaN equal to NaN (a metric a step could not compute is NaN in every record)."""
    return (math.isnan(a) and math.isnan(b)) or a == b


def files_of_run(wandb_dir: Path, wanted: str) -> list[Path]:
    """The ``run-<id>.wandb`` files under ``<dir>/wandb/`` whose run is ``wanted``, oldest
    first (one per start of that run)."""
    return [path for path in run_files(wandb_dir) if run_id(path) == wanted]


def visible_history(files: list[Path]) -> dict[int, dict[str, float]]:
    """The history W&B shows for a run written by ``files`` (its starts, oldest first): a
    resumed run's steps continue after the last step the run holds, and W&B drops a row at a
    step it has passed (its steps only increase; "Tried to log to step N that is less than
    the current step"), so each file adds only its rows after the steps already held."""
    rows: dict[int, dict[str, float]] = {}
    for path in files:
        held = max(rows, default=-1)
        rows.update({step: row for step, row in history_rows(path).items() if step > held})
    return rows
