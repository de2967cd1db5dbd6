"""The forkserver override is checked against the Python it runs on (``forkserver_process``)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from multiprocessing import popen_forkserver
from pathlib import Path

import pytest

import astrai.forkserver_process as forkserver_process
from astrai.forkserver_process import (
    OVERRIDDEN_LAUNCH_SHA256,
    ForkserverPopen,
    ForkserverProcess,
    launch_fingerprint,
    launch_override_applies,
    sigkill,
)


def test_the_override_was_written_against_this_python() -> None:
    """CI's Python is one the override was checked against: a CI that moves to another Python
    fails here until ``ForkserverPopen._launch`` is read against that version's source."""
    assert launch_fingerprint() in OVERRIDDEN_LAUNCH_SHA256
    launch_override_applies.cache_clear()
    assert launch_override_applies()


@pytest.fixture
def another_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This Python's ``Popen._launch`` as if it were not the one the override knows."""
    monkeypatch.setattr(forkserver_process, "OVERRIDDEN_LAUNCH_SHA256", {})
    launch_override_applies.cache_clear()
    yield
    launch_override_applies.cache_clear()


@pytest.mark.usefixtures("another_python")
def test_another_python_starts_workers_through_the_plain_forkserver(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    worker = ForkserverProcess(target=Path.touch, args=(ran,))
    with pytest.warns(RuntimeWarning, match="plain forkserver"):
        worker.start()
    worker.join(30)
    assert worker.exitcode == 0 and ran.exists()
    assert type(worker._popen) is popen_forkserver.Popen  # noqa: SLF001
    assert not isinstance(worker._popen, ForkserverPopen)  # noqa: SLF001
    # and a worker past its timeout still ends: the reason the workers are processes
    sleeper = ForkserverProcess(target=time.sleep, args=(60,))
    sleeper.start()  # warned once per process: no second warning
    sigkill(sleeper)
    sleeper.join(30)
    assert sleeper.exitcode == -signal.SIGKILL
