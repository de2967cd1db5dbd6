"""Reading a ``task=dataset`` file into rows, and one row's prompt and answer checked: the file
formats (``FORMATS``, or a ``save_to_disk`` directory) read offline with HF ``datasets``, a
prompt as a string or ``{role, content}`` turns, an answer as text. ``tasks.dataset`` builds the
task from them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from astrai.chat import Prompt
from astrai.paths import missing_reason

FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
ROLES = ("system", "user", "assistant")


class DatasetError(ValueError):
    """A prompt file that cannot be used; the message names the file, the row and the key."""


def read_rows(path: Path, key: str) -> list[dict[str, Any]]:
    """The records of one local file or ``save_to_disk`` folder (``key``: the config key that
    named it, for the message)."""
    if not path.exists():
        # a relative path is read from the working directory (Hydra's jobs do not change it)
        where = "" if path.is_absolute() else f" (relative to the working directory {Path.cwd()})"
        raise DatasetError(f"{key}: {path} {missing_reason(path)}{where}")
    # never reach the Hugging Face Hub, whatever the environment says
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    import datasets

    datasets.disable_progress_bars()
    # its loaders log a multi-line error before raising; the one line below says it instead
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        if path.is_file() and path.stat().st_size < 4096 and not path.read_bytes().strip():
            return []  # an empty file: the caller says it has no rows
        if path.is_dir():
            loaded = datasets.load_from_disk(str(path), keep_in_memory=True)
            if isinstance(loaded, datasets.DatasetDict):
                raise DatasetError(
                    f"{key}: {path} holds the splits {sorted(loaded)}: point at one of them "
                    f"({path}/{next(iter(loaded))})"
                )
            return list(loaded.to_list())
        builder = FORMATS.get(path.suffix.lower())
        if builder is None:
            raise DatasetError(
                f"{key}: {path}: unknown format {path.suffix!r} (use {', '.join(FORMATS)} "
                "or a save_to_disk folder)"
            )
        held = _lone_json_value(path) if path.suffix.lower() == ".json" else None
        if held is not None:
            raise DatasetError(
                f"{key}: {path} is not an array of records: it holds one JSON {held} (write "
                "[{...}, {...}], or one record per line in a .jsonl file)"
            )
        with tempfile.TemporaryDirectory(prefix="astrai-datasets-") as cache:
            loaded = datasets.load_dataset(
                builder, data_files=str(path), split="train", cache_dir=cache, keep_in_memory=True
            )
            return list(loaded.to_list())
    except DatasetError:
        raise
    except Exception as err:
        raise DatasetError(f"{key}: {path}: {_unreadable(path, err)}") from err


JSON_TYPES = {dict: "object", str: "string", int: "number", float: "number", bool: "boolean"}


def _lone_json_value(path: Path) -> str | None:
    """What a ``.json`` file holds when it is one JSON value but no array (``object``,
    ``string``, ...): the ``json`` loader would read a lone object as one row, and a dict of
    columns as one row of lists. None for an array, or JSON Lines (the loader reads both)."""
    with path.open("rb") as handle:
        if handle.read(4096).lstrip().startswith(b"["):
            return None  # an array: not parsed twice
    try:
        value = json.loads(path.read_bytes())
    except ValueError:  # JSON Lines, or broken: the loader reads or reports it
        return None
    return JSON_TYPES.get(type(value), "null")


def _unreadable(path: Path, err: Exception) -> str:
    """Why a file did not load: for JSON Lines, the first row that is no JSON object."""
    if path.is_file() and path.suffix.lower() == ".jsonl":
        with path.open(encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as bad:
                    return f"row {number}: unreadable JSON ({bad.msg})"
                if not isinstance(record, dict):
                    return f"row {number}: a JSON object was expected, got {record!r:.60}"
    cause = err.__cause__ or err
    return (
        f"unreadable ({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''})"
    )


def parse_turns(value: Any, where: str) -> Prompt:
    """A prompt field -> a string or a tuple of chat turns; ``where`` names file, row, key."""
    if isinstance(value, str):
        if not value.strip():
            raise DatasetError(f"{where} is empty")
        return value
    if not isinstance(value, Sequence) or not value:
        raise DatasetError(f"{where}: a string or a list of {{role, content}} turns was expected")
    turns = []
    for i, turn in enumerate(value):
        if not isinstance(turn, Mapping) or set(turn) - {"role", "content"} - {"name"}:
            raise DatasetError(f"{where}[{i}]: a {{role, content}} turn was expected")
        role, content = turn.get("role"), turn.get("content")
        if role not in ROLES or not isinstance(content, str):
            raise DatasetError(
                f"{where}[{i}]: role must be one of {ROLES} and content a string, got {turn!r:.80}"
            )
        turns.append({"role": role, "content": content})
    if turns[-1]["role"] != "user":
        raise DatasetError(
            f"{where}: the last turn must be the user's (the policy answers it), got "
            f"{turns[-1]['role']!r}"
        )
    return tuple(turns)


def parse_answer(value: Any, where: str) -> str:
    if value is None:
        raise DatasetError(f"{where} is missing")
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 72, not 72.0, from a column that also holds 2.5 (or a CSV's)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise DatasetError(f"{where}: text was expected, got {type(value).__name__}")
    return value


def prompt_text(prompt: Prompt) -> str:
    """What rewards and logs see: the string, or the last user turn's content."""
    if isinstance(prompt, str):
        return prompt
    return next(t["content"] for t in reversed(prompt) if t["role"] == "user")


def prompt_split_key(prompt: Prompt) -> str:
    """The identity the eval split hashes: the string (a lone user turn counts as its
    string), or the turns as JSON. Taken before ``system_prompt`` is added, so changing the
    system prompt keeps the split."""
    if isinstance(prompt, str):
        return prompt
    if len(prompt) == 1 and prompt[0]["role"] == "user":
        return prompt[0]["content"]
    return json.dumps([dict(t) for t in prompt], sort_keys=True, ensure_ascii=False)
