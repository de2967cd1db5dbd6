"""The sampling thread's own CUDA stream (``max_policy_lag`` >= 1 on a GPU).

Kernels queued from two threads on one CUDA stream run one after the other: the rollout the
sampling thread decodes would wait behind the update's kernels, and its per-token
``finished.all()`` sync behind all of them, so nothing would overlap. The sampling thread
therefore queues its work on a stream of its own, with three waits that keep it correct:

- before a job: the job's stream waits for what the submitting thread queued until then
  (``ready_event``: the snapshot's weights, copied on the trainer's stream);
- after it: the thread waits for its stream's work (``Stream.synchronize``), so a finished job's
  tensors hold their values when the trainer reads them;
- where the trainer takes them (``hand_over``): each CUDA tensor of the result is marked as
  used on the trainer's stream (``Tensor.record_stream``), so the caching allocator does not give
  its memory back to the sampling stream while the trainer's kernels may still read it.

On the CPU every function here does nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


def side_stream(device: torch.device) -> torch.cuda.Stream | None:
    """A new stream on ``device`` for the sampling thread; None off CUDA."""
    return torch.cuda.Stream(device) if device.type == "cuda" else None


def ready_event(device: torch.device) -> torch.cuda.Event | None:
    """An event recorded on the calling thread's current stream of ``device`` (what a job
    submitted now must wait for); None off CUDA."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


def hand_over(result: Any) -> None:
    """Mark every CUDA tensor inside ``result`` (dataclasses, mappings, sequences) as used on
    the calling thread's current stream."""
    for tensor in _tensors(result):
        if tensor.is_cuda:
            tensor.record_stream(torch.cuda.current_stream(tensor.device))


def _tensors(value: Any, seen: set[int] | None = None) -> list[torch.Tensor]:
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items: Any = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, list | tuple):
        items = value
    else:
        return []
    return [t for item in items for t in _tensors(item, seen)]
