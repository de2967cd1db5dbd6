"""One error path for the command-line tools: an expected failure is one line on stderr and exit
status 2, never a traceback.

Each CLI's ``main`` is wrapped with ``@one_line_errors("astrai.<tool>")``. Expected failures are
bad input and the machine saying no: ``OSError`` (a missing or unwritable path, a full disk),
``ValueError`` (bad files and options; ``UnicodeDecodeError`` and the CLIs' own errors are
ValueErrors) and YAML syntax errors. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from typing import NoReturn

import yaml

EXIT_USAGE = 2  # what argparse exits with for a bad command line; the CLIs' bad input too
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, yaml.YAMLError)
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a tool the pipe killed


def silence_stdout() -> int:
    """The reader of stdout went away (``... | head``): point stdout at /dev/null, so the
    interpreter's own flush at exit does not fail again with a traceback; returns the exit
    status Unix tools give then (``BROKEN_PIPE_EXIT``)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return BROKEN_PIPE_EXIT


def print_page(text: str) -> int:
    """Print ``text`` (a help page) and flush; 0, or ``BROKEN_PIPE_EXIT`` quietly when the
    reader left early (``python train.py --help | head``)."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return silence_stdout()
    return 0


def error_line(err: BaseException) -> str:
    """``err`` as one line: an ``OSError`` as ``PATH: reason`` (``strerror``, e.g. "No space
    left on device", without the ``[Errno N]``), a non-UTF-8 file's decode error in words, and
    any other message joined onto one line."""
    if isinstance(err, OSError) and err.strerror:
        paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
        return ": ".join([" -> ".join(paths), err.strerror] if paths else [err.strerror])
    if isinstance(err, UnicodeDecodeError):
        byte = err.object[err.start : err.start + 1].hex()
        return f"not UTF-8 text (byte 0x{byte} at offset {err.start})"
    return " ".join(str(err).split()) or type(err).__name__


def report_error(prog: str, err: BaseException | str) -> int:
    """Print ``prog: <one line>`` to stderr; return ``EXIT_USAGE``."""
    message = err if isinstance(err, str) else error_line(err)
    print(f"{prog}: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_USAGE


def one_line_errors(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorate a CLI's ``main``: an expected error becomes ``prog: <one line>`` on stderr and
    the return value 2 (``sys.exit(main())`` turns it into the exit status)."""

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapped(*args: object, **kwargs: object) -> int:
            try:
                return main(*args, **kwargs)
            except EXPECTED_ERRORS as err:
                return report_error(prog, err)

        return wrapped

    return wrap


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line usage error (``astrai.<tool>: message``, exit 2) instead of the
    usage block followed by the error; ``--help`` still prints the usage."""

    def error(self, message: str) -> NoReturn:
        report_error(self.prog.removeprefix("python -m "), message)  # as main's errors
        sys.exit(EXIT_USAGE)
