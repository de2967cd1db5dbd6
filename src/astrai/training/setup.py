"""Run set-up helpers: device choice, seeding, and RNG state capture for exact resume."""

from __future__ import annotations

import base64
import random
from typing import Any

import numpy as np
import torch

from astrai.distributed import DistContext


def resolve_device(
    device: str, gpu_devices: list[int] | None = None, dist: DistContext | None = None
) -> torch.device:
    """Pick this process's torch device.

    Args:
        device: ``auto`` (CUDA when present, else CPU), ``cpu`` or ``cuda``.
        gpu_devices: physical GPU indices selected by ``infra.gpu.devices`` (None = all); a
            single-process run uses the first one.
        dist: in a multi-process run, rank ``r`` uses visible GPU ``LOCAL_RANK`` (the launcher
            has already narrowed ``CUDA_VISIBLE_DEVICES`` to the selected GPUs).
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("infra.device=cuda but no CUDA device is available")
    if dist is not None and dist.world_size > 1:
        torch.cuda.set_device(dist.local_rank)
        return torch.device("cuda", dist.local_rank)
    index = gpu_devices[0] if gpu_devices else 0
    if index >= torch.cuda.device_count():
        visible = torch.cuda.device_count()
        raise RuntimeError(f"infra.gpu.devices selects GPU {index}; only {visible} are visible")
    return torch.device("cuda", index)


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
    """Inverse of ``capture_rng_state``; every named generator must be present in ``state``."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(_decode_bytes(state["torch"]))
    if torch.cuda.is_available() and "torch_cuda" in state:
        torch.cuda.set_rng_state_all([_decode_bytes(s) for s in state["torch_cuda"]])
    for gen_name, generator in generators.items():
        generator.set_state(_decode_bytes(state["generators"][gen_name]))
