"""Graceful stop: signal handling and the time budget."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from astrai.training.stopping import StopInterrupt, StopRequest, interruptible


def test_first_signal_becomes_the_stop_reason_and_handlers_are_restored() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        assert stop.reason is None
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to the main thread before the next line
        assert stop.reason == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is previous


def test_sigint_is_graceful_too() -> None:
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.reason == "SIGINT"


def test_time_budget() -> None:
    with StopRequest(max_duration_s=3600) as stop:
        assert stop.reason is None
    with StopRequest(max_duration_s=1e-9) as stop:
        assert stop.reason == "max_duration"


def test_a_second_signal_exits_at_once() -> None:
    """In a child process: the first SIGTERM is absorbed, the second kills it by the signal."""
    script = (
        "import os, signal\n"
        "from astrai.training.stopping import StopRequest\n"
        "with StopRequest() as stop:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    print(stop.reason, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    print('survived', flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.splitlines() == ["SIGTERM"]
    assert result.returncode == -signal.SIGTERM


def test_interruptible_raises_at_the_signal_and_only_inside() -> None:
    with StopRequest() as stop:
        with pytest.raises(StopInterrupt) as caught:
            with interruptible():
                os.kill(os.getpid(), signal.SIGTERM)
                raise AssertionError("the handler raises before this line")
        assert caught.value.signal_name == "SIGTERM" and stop.reason == "SIGTERM"
        with pytest.raises(StopInterrupt):  # entered after the signal: at once
            with interruptible():
                raise AssertionError("not reached")
        with interruptible(enabled=False):  # several processes: never abandoned
            pass


def test_a_library_stop_request_starts_afresh() -> None:
    """Outside ``catch_stop_signals`` (a test, a notebook) an earlier request's signal does not
    carry over into the next one."""
    with StopRequest():
        os.kill(os.getpid(), signal.SIGTERM)
    with StopRequest() as stop:
        assert stop.reason is None
