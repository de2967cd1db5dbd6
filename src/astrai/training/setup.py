"""Run set-up helpers: device choice and seeding."""

from __future__ import annotations

import random

import numpy as np
import torch


def resolve_device(device: str, gpu_devices: list[int] | None = None) -> torch.device:
    """Pick the torch device of a single-process run.

    Args:
        device: ``auto`` (CUDA when present, else CPU), ``cpu`` or ``cuda``.
        gpu_devices: physical GPU indices selected by ``infra.gpu.devices`` (None = all); a
            single-process run uses the first one.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("infra.device=cuda but no CUDA device is available")
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
