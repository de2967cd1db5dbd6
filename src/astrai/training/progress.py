"""The run's tqdm progress bar, drawn on a terminal only.

tqdm redraws its line with ``\\r`` and cursor codes; in a file or a pipe (``> train.out 2>&1``,
a job scheduler's log, a test's captured output) each redraw is one more line of noise. The bar
is drawn only when ``trainer.progress_bar`` is on and its stream (stderr, tqdm's default) is a
terminal; the log lines say the same every evaluation (``step N/T: reward ...``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (False for a closed or replaced stream without a
    file descriptor)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


@contextlib.contextmanager
def progress_bar(enabled: bool, total: int, initial: int) -> Iterator[tqdm]:
    """A tqdm bar of ``total`` steps from ``initial`` on stderr, disabled (its updates do
    nothing) unless ``enabled`` and stderr is a terminal. While it is drawn, log lines to the
    console go through ``tqdm.write``, so they never break it."""
    stream = sys.stderr
    shown = enabled and is_terminal(stream)
    bar = tqdm(total=total, initial=initial, disable=not shown, desc="astrai", file=stream)
    console = logging_redirect_tqdm() if shown else contextlib.nullcontext()
    try:
        with console:
            yield bar
    finally:
        bar.close()
