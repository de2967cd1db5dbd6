"""Run set-up helpers: device choice, CPU threads, seeding, and RNG state capture for exact
resume."""

from __future__ import annotations

import base64
import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn

from astrai.config.threads import available_cores, resolve_num_threads
from astrai.config.validate import plan_here
from astrai.distributed import DistContext


def resolve_device(
    infra: DictConfig, dist: DistContext | None = None, cuda_count: int | None = None
) -> torch.device:
    """This process's torch device, from the device plan of a process that already is local
    rank ``dist.local_rank`` (``astrai.config.devices``, ``where="worker"``): CPU, or the
    rank's GPU among those ``infra.gpu.devices`` selects. A launcher that narrowed
    ``CUDA_VISIBLE_DEVICES`` told this process ``infra.gpu.devices=all``, so rank r takes
    visible GPU r; under torchrun with a list, rank r takes the r-th listed GPU.

    Args:
        infra: the ``infra`` config node.
        dist: this process's place in the job (default: rank 0 of 1).
        cuda_count: the visible CUDA devices (default ``torch.cuda.device_count()``).
    """
    plan = plan_here(infra, "worker", cuda_count)
    index = plan.rank_device(0 if dist is None else dist.local_rank)
    if index is None:
        return torch.device("cpu")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


# torch's own intra-op default in this process (OMP_NUM_THREADS, else the cores), read before
# any job of the process sets its own: ``auto`` restores it for a job that runs alone, also
# after an earlier job of the same multirun process set another count
TORCH_DEFAULT_THREADS = torch.get_num_threads()


def apply_num_threads(setting: object, parallel_jobs: int = 1) -> int:
    """Set torch's intra-op threads for this job (before any model is built); returns the count.

    Args:
        setting: ``infra.num_threads`` (``"auto"`` or an int >= 1).
        parallel_jobs: the jobs running side by side with this one (the joblib launcher's).
    """
    threads = resolve_num_threads(
        setting, available_cores(), parallel_jobs, default=TORCH_DEFAULT_THREADS
    )
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (model init draws from torch's global generator)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_generator(seed: int, device: torch.device) -> torch.Generator:
    """A dedicated generator so sampling and shuffling streams are independent of model init."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def _encode_bytes(state: torch.Tensor) -> str:
    return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")


def _decode_bytes(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def capture_rng_state(generators: dict[str, torch.Generator]) -> dict[str, Any]:
    """JSON-ready states of Python's, NumPy's and torch's global generators (CUDA included when
    present) and of the named dedicated ``generators``."""
    np_state: tuple[Any, ...] = np.random.get_state(legacy=True)  # type: ignore[assignment]
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": _encode_bytes(torch.get_rng_state()),
        "generators": {name: _encode_bytes(g.get_state()) for name, g in generators.items()},
    }
    if torch.cuda.is_available():
        state["torch_cuda"] = [_encode_bytes(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator]) -> None:
    """Inverse of ``capture_rng_state``; every named generator must be present in ``state``
    (``state`` may hold more, e.g. one left out because it moved to another device type)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(_decode_bytes(state["torch"]))
    if torch.cuda.is_available() and "torch_cuda" in state:
        # one state per GPU the saving process saw; GPUs this process cannot see keep none
        visible = state["torch_cuda"][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all([_decode_bytes(s) for s in visible])
    for gen_name, generator in generators.items():
        generator.set_state(_decode_bytes(state["generators"][gen_name]))


@contextlib.contextmanager
def on_device_while(module: nn.Module, device: torch.device, enabled: bool) -> Iterator[None]:
    """Inside the block ``module`` is on ``device``, and back on the CPU after it (enabled);
    a no-op context when not enabled."""
    if not enabled:
        yield
        return
    module.to(device)
    try:
        yield
    finally:
        module.to("cpu")
