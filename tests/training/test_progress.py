"""The tqdm bar is drawn on a terminal only: a file, a pipe or a test's captured stderr gets no
``\\r`` redraws (through ``python train.py``: tests/training/test_banner.py)."""

from __future__ import annotations

import fcntl
import io
import logging
import os
import pty
import struct
import sys
import termios
from pathlib import Path

import pytest

from astrai.training.progress import is_terminal, progress_bar


def _three_steps(enabled: bool, log: bool = False) -> None:
    with progress_bar(enabled, total=3, initial=0) as bar:
        for _ in range(3):
            bar.update(1)
            bar.set_postfix(reward="0.500")
        if log:
            logging.getLogger("astrai.test_progress").warning("a log line while the bar is drawn")


def _read_all(fd: int) -> str:
    chunks = []
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, OSError):  # drained (a pty's master says EIO once closed)
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_no_bar_when_stderr_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with (tmp_path / "stderr.txt").open("w") as captured:
        monkeypatch.setattr(sys, "stderr", captured)
        _three_steps(enabled=True)
    assert (tmp_path / "stderr.txt").read_text() == ""  # before: "\rastrai: 0%| ..." x4


def test_no_bar_in_captured_output(monkeypatch: pytest.MonkeyPatch) -> None:
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    _three_steps(enabled=True)
    assert "\r" not in captured.getvalue() and "astrai" not in captured.getvalue()


def _terminal() -> tuple[int, int]:
    """A pseudo-terminal (master, slave) 80 columns wide (a new one is 0 wide: tqdm would draw
    an empty bar)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    return master, slave


def test_the_bar_and_whole_log_lines_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real pseudo-terminal: the bar is drawn (redrawn with ``\\r``) and a console log line
    comes out whole, on a line of its own, through ``tqdm.write``."""
    master, slave = _terminal()
    terminal = os.fdopen(slave, "w", buffering=1)
    handler = logging.StreamHandler(terminal)  # a console handler on the root, as Hydra's
    logger = logging.getLogger()
    logger.addHandler(handler)
    try:
        monkeypatch.setattr(sys, "stderr", terminal)
        assert is_terminal(terminal)
        _three_steps(enabled=True, log=True)
        terminal.flush()
        shown = _read_all(master)
    finally:
        logger.removeHandler(handler)
        terminal.close()
        os.close(master)
    assert "\r" in shown and "astrai: 100%" in shown and "3/3" in shown
    lines = shown.replace("\r\n", "\n").split("\n")
    assert any(line.endswith("a log line while the bar is drawn") for line in lines)


def test_progress_bar_false_draws_nothing_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    master, slave = _terminal()
    terminal = os.fdopen(slave, "w", buffering=1)
    try:
        monkeypatch.setattr(sys, "stderr", terminal)
        _three_steps(enabled=False)
        terminal.flush()
        assert _read_all(master) == ""
    finally:
        terminal.close()
        os.close(master)


def test_a_closed_stream_is_no_terminal() -> None:
    stream = io.StringIO()
    stream.close()
    assert is_terminal(stream) is False
