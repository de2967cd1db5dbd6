"""``training.sampling.cuda_streams``: what the sampling thread's stream needs, and nothing on the
CPU."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from astrai.training.sampling import cuda_streams


@dataclass
class _Result:
    rollout: dict[str, torch.Tensor]
    extra: list[object]


def test_on_the_cpu_no_stream_no_event_and_nothing_recorded() -> None:
    cpu = torch.device("cpu")
    assert cuda_streams.side_stream(cpu) is None and cuda_streams.ready_event(cpu) is None
    cuda_streams.hand_over(_Result({"a": torch.ones(2)}, [torch.zeros(1), "x"]))  # no error


def test_hand_over_finds_every_tensor_once() -> None:
    shared = torch.ones(3)
    result = _Result({"a": shared, "b": torch.zeros(2)}, [shared, (torch.ones(1), None), {1: 2}])
    found = cuda_streams._tensors(result)
    assert len(found) == 3 and any(t is shared for t in found)
    assert sum(t is shared for t in found) == 1
