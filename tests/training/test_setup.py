"""Device choice and seeding."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from astrai.config.errors import ConfigError
from astrai.distributed import DistContext
from astrai.training.setup import make_generator, resolve_device, seed_everything


def _infra(device: str = "auto", devices: object = "all", nproc: object = "auto") -> DictConfig:
    return OmegaConf.create(
        {"device": device, "gpu": {"devices": devices}, "nproc_per_node": nproc}
    )


@pytest.fixture
def set_devices(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``torch.cuda.set_device`` recorded instead of called (no GPU here); no inherited
    ``CUDA_VISIBLE_DEVICES``."""
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_device", calls.append)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return calls


def test_cpu_and_auto_devices(set_devices: list[int]) -> None:
    assert resolve_device(_infra("cpu"), cuda_count=4) == torch.device("cpu")
    assert resolve_device(_infra("cpu", [1, 2]), cuda_count=4) == torch.device("cpu")
    assert resolve_device(_infra("auto", [1, 2]), cuda_count=0) == torch.device("cpu")
    assert resolve_device(_infra("auto"), cuda_count=0) == torch.device("cpu")
    assert set_devices == []  # the CPU binds no GPU
    # the GPU count given, not the machine's: the same outcome on a CPU box and a GPU one
    assert resolve_device(_infra("auto"), cuda_count=2) == torch.device("cuda", 0)
    assert set_devices == [0]


def test_cuda_without_gpu_is_an_error(set_devices: list[int]) -> None:
    with pytest.raises(ConfigError, match="infra.device=cuda but no CUDA device is visible"):
        resolve_device(_infra("cuda"), cuda_count=0)


@pytest.mark.parametrize(
    ("devices", "local_rank", "cuda_count", "index"),
    [
        ("all", 0, 2, 0),
        ([1], 0, 2, 1),  # one process on the host: the listed GPU itself, nothing narrowed
        ([1, 0], 0, 2, 1),
        ([1, 0], 1, 2, 0),  # a torchrun rank with a list: the r-th listed GPU
        ("all", 1, 2, 1),  # an elastic worker told "all" after narrowing: visible GPU r
    ],
)
def test_each_local_rank_takes_its_gpu(
    set_devices: list[int], devices: object, local_rank: int, cuda_count: int, index: int
) -> None:
    dist = DistContext(rank=local_rank, local_rank=local_rank, world_size=2)
    device = resolve_device(_infra("auto", devices), dist, cuda_count=cuda_count)
    assert device == torch.device("cuda", index)
    assert set_devices == [index]


def test_a_container_told_all_uses_its_first_visible_gpu(
    set_devices: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the Docker launcher narrowed CUDA_VISIBLE_DEVICES to "1" and told the container "all";
    # the container then sees one GPU, its cuda:0 (before, it was told [1] and asked for cuda:1:
    # "selects GPU 1; only 1 are visible")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert resolve_device(_infra("auto", "all"), cuda_count=1) == torch.device("cuda", 0)
    with pytest.raises(ConfigError, match=r"infra\.gpu\.devices=\[1\] selects GPU 1"):
        resolve_device(_infra("auto", [1]), cuda_count=1)


def test_more_ranks_than_selected_gpus_is_an_error(set_devices: list[int]) -> None:
    dist = DistContext(rank=2, local_rank=2, world_size=3)
    with pytest.raises(ConfigError, match="infra.gpu.devices selects 2 GPU"):
        resolve_device(_infra("cuda", [1, 0]), dist, cuda_count=2)


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
