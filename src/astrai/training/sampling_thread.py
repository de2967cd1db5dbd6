"""The sampling thread of ``training.overlap``: one daemon thread that runs the submitted jobs
in order, like a one-worker ``ThreadPoolExecutor`` whose thread the interpreter's exit does not
join (a job a stop abandoned may still be blocked when the run ends), and that tells, under one
lock, a job that never began from one that is running (``cancel``)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

import torch

log = logging.getLogger("astrai.training.overlap")


class SamplingThread:
    """One daemon thread that runs the submitted jobs in order (a one-worker executor whose
    thread the interpreter's exit does not wait for: a job abandoned by a stop may still be
    blocked when the run ends).

    Args:
        threads: its torch intra-op threads.
        device: its current CUDA device (a new thread starts on cuda:0).
        began: called with a job's step as it begins, under ``lock`` (``cancel`` under the
            same lock then tells "never began" from "running").
    """

    def __init__(self, threads: int, device: torch.device, began: Callable[[int], None]) -> None:
        self.lock = threading.Lock()
        self._began = began
        self._jobs: queue.SimpleQueue[tuple[Future, Callable, tuple] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._serve, args=(threads, device), name="astrai-sampler", daemon=True
        )
        self._thread.start()

    def submit(self, fn: Callable[..., object], step: int, *args: object) -> Future:
        future: Future[object] = Future()
        self._jobs.put((future, fn, (step, *args)))
        return future

    def close(self, timeout: float) -> None:
        """No more jobs; wait ``timeout`` seconds at most for the one running."""
        self._jobs.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning(
                "the sampling thread is still busy %gs after the stop: left behind", timeout
            )

    def _serve(self, threads: int, device: torch.device) -> None:
        _init_sampling_thread(threads, device)
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            with self.lock:
                if not future.set_running_or_notify_cancel():
                    continue
                self._began(args[0])
            try:
                result = fn(*args)
            except BaseException as err:  # noqa: BLE001 (the waiter raises it, whatever it is)
                future.set_exception(err)
            else:
                future.set_result(result)


def _init_sampling_thread(threads: int, device: torch.device) -> None:
    """The sampling thread's own settings: its intra-op threads, and its current CUDA device
    (per thread: a new thread starts on cuda:0, not the rank's device)."""
    torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)
