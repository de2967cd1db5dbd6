"""An update's metrics are reduced over the ranks once (issue 32, 10): ``MetricMeans.compute``
sums them over every rank; the trainer used to average that result over the ranks again (the
same values, one collective too many).

A world of two is stood in for by ``torch.distributed`` answering as if initialised with two
ranks, and an ``all_reduce`` that doubles its tensor (the other rank holding the same sums)
and counts its calls."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config

from astrai.training.run import Run

# rewards that vary within every group by construction: the advantages are +-1, so the update's
# metrics are not the zeros of a batch whose rewards all came out 0
JOB = ["debug=quick", "logger.tensorboard=false", *ALTERNATING]


def test_an_update_reduces_its_metrics_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = Run(compose_config(JOB), tmp_path)
    rollout = trainer.trainer.rollout()
    trainer.trainer.prepare(rollout)
    assert rollout.advantages.abs().max().item() > 0.5
    alone = Run(compose_config(JOB), tmp_path / "b")
    twin = alone.trainer.rollout()
    alone.trainer.prepare(twin)
    expected = alone.trainer.update(twin)  # one process: no collective at all
    calls: list[torch.Size] = []

    def all_reduce(tensor: torch.Tensor, *args: object, **kwargs: object) -> None:
        calls.append(tensor.shape)
        tensor.mul_(2)  # the other rank's sums are this rank's

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *args: 2)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    metrics = trainer.trainer.update(rollout)
    assert len(calls) == 1  # was 2: MetricMeans.compute, then mean_over_ranks
    assert metrics == pytest.approx(expected)
