"""A file that fills up as a full disk does, for the checkpoint writers' tests: the real file
is written until ``room`` bytes are used, then every write raises ``OSError(ENOSPC)`` with no
file name, as the kernel's ``write`` does. torch's zip writer, writing into it, then fails as on
a real full filesystem (measured on a 256 KiB tmpfs, torch 2.13): a ``RuntimeError``
"[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598" whose ``__context__`` is
that ``OSError``."""

from __future__ import annotations

import errno
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


class FillingFile(io.RawIOBase):
    """A raw file that takes ``room`` bytes, then answers every write with ENOSPC."""

    def __init__(self, path: Path, room: int) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 (closed by close())
        self._room = room

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = len(memoryview(data))
        if size > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= size
        return self._file.write(data)

    def close(self) -> None:
        self._file.close()
        super().close()


def full_disk_open(names: set[str], room: int = 4096) -> Callable[..., IO[Any]]:
    """An ``open`` for ``astrai.checkpoints.io`` (the module's name shadows the builtin): files
    named in ``names`` opened for writing fill up after ``room`` bytes, others open as usual."""

    def opener(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> IO[Any]:
        if Path(file).name in names and "w" in mode:
            return io.BufferedWriter(FillingFile(Path(file), room))
        return open(file, mode, *args, **kwargs)  # noqa: SIM115

    return opener
