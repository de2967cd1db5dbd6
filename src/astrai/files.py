"""File-system changes that are all or nothing: atomic writes, and undoing a fresh directory.

A file or directory is written under a hidden temporary sibling name
(``.<name>.tmp-<pid>-<random>``) and renamed into place, so a reader never sees it half-written;
a failure (or a kill) before the rename leaves at most a temporary, which readers skip
(``checkpoints.layout.stale_temporaries`` finds them by ``TMP_MARKER``). The one home of these
writers: checkpoints, exports, the GGUF import and the trainer's reference weights use them.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

TMP_MARKER = ".tmp-"  # temporaries are named ".<final name>.tmp-<pid>-<random>"

FileWriter = Callable[[Path], None]


def temporary_sibling(path: Path) -> Path:
    """A hidden, unique name next to ``path`` that ``TMP_MARKER`` identifies as a temporary."""
    return path.with_name(f".{path.name}{TMP_MARKER}{os.getpid()}-{uuid.uuid4().hex[:8]}")


# a Rust io::Error inside safetensors' or tokenizers' exceptions: "Os { code: 28, ... }" or
# "No space left on device (os error 28)"
_RUST_OS_ERROR = re.compile(r"(?:\bcode: |\(os error )(\d+)")


@contextmanager
def naming_write_errors(path: Path) -> Iterator[None]:
    """Within the block, a failed write is an ``OSError`` that names ``path`` and its cause
    (``errno``/``strerror``), so the CLIs print one line ``PATH: No space left on device``:
    a plain write's ``OSError`` carries no file name, and safetensors reports a full disk as
    its own ``SafetensorError`` (not an ``OSError``), the Rust error's text inside."""
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        text = err.strerror or " ".join(str(err).split()) or type(err).__name__
        raise OSError(err.errno, text, str(path)) from err
    except Exception as err:
        text = " ".join(str(err).split())
        match = _RUST_OS_ERROR.search(text)
        if type(err).__name__ != "SafetensorError" and match is None:
            raise
        code = int(match[1]) if match else errno.EIO
        cause = os.strerror(code) if match else f"{os.strerror(code)} ({text})"
        raise OSError(code, cause, str(path)) from err


def fsync_path(path: Path) -> None:
    """Flush a file's (or a directory's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomic(path: Path, write: FileWriter) -> None:
    """One file written under a temporary name, fsynced and renamed into place."""
    tmp = temporary_sibling(path)
    try:
        with naming_write_errors(tmp):
            write(tmp)
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def write_files_atomic(final: Path, writers: Mapping[str, FileWriter]) -> Path:
    """The directory ``final`` holding one file per ``writers[name](path)``, replacing an
    existing ``final`` whole; returns ``final``.

    The files are written into a temporary sibling directory; they and the directory are
    fsynced, then the directory is renamed to its final name. On any failure the temporary is
    removed and ``final`` is left as it was.
    """
    tmp = temporary_sibling(final)
    tmp.mkdir()
    try:
        for name, write in writers.items():
            with naming_write_errors(tmp / name):
                write(tmp / name)
                fsync_path(tmp / name)
        fsync_path(tmp)
        if final.exists():  # e.g. re-saving the same step: replace it whole
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_path(final.parent)
    return final


def write_dir_atomic(out: Path, write: FileWriter) -> None:
    """A new directory ``out`` (which must not exist) filled by ``write(tmp)`` in a temporary
    sibling, then renamed into place: readable by all (0755 / 0644), never half-written."""
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose a new output directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(out)
    tmp.mkdir()
    try:
        with naming_write_errors(tmp):  # a writer that names no file of its own
            write(tmp)
        for path in tmp.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        tmp.chmod(0o755)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def discard_fresh_dir(directory: Path, expected: set[str]) -> None:
    """Remove ``directory`` if it holds nothing but the ``expected`` names (what Hydra wrote
    before a failure), then every parent below the working directory left empty by that, so
    a failed start leaves nothing behind. A directory holding anything else is left alone."""
    if not directory.is_dir() or {p.name for p in directory.iterdir()} - expected:
        return
    shutil.rmtree(directory)
    cwd = Path.cwd().resolve()
    parent = directory.resolve().parent
    while parent != cwd and cwd in parent.parents and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
