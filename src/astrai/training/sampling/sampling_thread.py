"""The sampling thread of ``training.sampling.overlap``: one daemon thread that runs the submitted
jobs in order, like a one-worker ``ThreadPoolExecutor`` whose thread the interpreter's exit does not
join (a job a stop abandoned may still be blocked when the run ends), and that tells, under one
lock, a job that never began from one that is running (``cancel``)."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from astrai.envs.tool_limits import abandon_steps_of
from astrai.rewards.worker import abandon_reward_calls
from astrai.training.sampling.cuda_streams import ready_event, side_stream

log = logging.getLogger("astrai.training.sampling.overlap")


class SamplingThread:
    """One daemon thread that runs the submitted jobs in order (a one-worker executor whose
    thread the interpreter's exit does not wait for: a job abandoned by a stop may still be
    blocked when the run ends).

    On CUDA its jobs run on a stream of their own (``training.sampling.cuda_streams``): each waits
    for what the submitting thread queued before it, and the thread waits for a job's kernels
    before its result is set.

    Args:
        threads: its torch intra-op threads.
        device: its current CUDA device (a new thread starts on cuda:0).
        began: called with a job's step as it begins, under ``lock`` (``cancel`` under the
            same lock then tells "never began" from "running").
    """

    def __init__(self, threads: int, device: torch.device, began: Callable[[int], None]) -> None:
        self.lock = threading.Lock()
        self._began = began
        self._device = device
        self._jobs: queue.SimpleQueue[tuple[Future, Callable, tuple, Any] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(
            target=self._serve, args=(threads, device), name="astrai-sampler", daemon=True
        )
        self._thread.start()

    def submit(self, fn: Callable[..., object], step: int, *args: object) -> Future:
        future: Future[object] = Future()
        # the snapshot it samples was copied on this thread's stream: the job waits for it
        self._jobs.put((future, fn, (step, *args), ready_event(self._device)))
        return future

    def abandon_running_job(self) -> None:
        """What the running job waits on ends: its reward calls (``abandon_reward_calls``,
        every reward worker of the process) and its environment steps, this wait and any later
        (``abandon_steps_of``): a job a stop abandoned neither scores nor plays on."""
        abandon_reward_calls()
        abandon_steps_of(self._thread)

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
        stream = side_stream(device)
        while (job := self._jobs.get()) is not None:
            future, fn, args, ready = job
            with self.lock:
                if not future.set_running_or_notify_cancel():
                    continue
                self._began(args[0])
            try:
                with contextlib.nullcontext() if stream is None else torch.cuda.stream(stream):
                    if stream is not None and ready is not None:
                        stream.wait_event(ready)
                    result = fn(*args)
                    if stream is not None:
                        stream.synchronize()  # its tensors hold their values when it is set
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
