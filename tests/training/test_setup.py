"""Device choice and seeding."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from astrai.training.setup import make_generator, resolve_device, seed_everything


def test_cpu_and_auto_devices() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cpu", [1, 2]) == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


def test_cuda_without_gpu_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(RuntimeError, match="infra.device=cuda"):
        resolve_device("cuda")


def test_seed_everything_repeats_every_stream() -> None:
    def draw() -> tuple[float, float, float]:
        return random.random(), float(np.random.rand()), torch.rand(()).item()

    seed_everything(5)
    first = draw()
    seed_everything(5)
    assert draw() == first
    seed_everything(6)
    assert draw() != first


def test_generators_are_independent_of_the_global_stream() -> None:
    a = make_generator(1, torch.device("cpu"))
    torch.manual_seed(0)
    torch.rand(10)  # consuming the global stream must not move the dedicated one
    b = make_generator(1, torch.device("cpu"))
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))
