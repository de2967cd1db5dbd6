"""Run set-up helpers: device choice and seeding."""

from __future__ import annotations

import random

import numpy as np
import torch


def resolve_device(device: str) -> torch.device:
    """``auto`` picks CUDA when present, else CPU; ``cuda`` without a GPU is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("infra.device=cuda but no CUDA device is available")
    return torch.device(device)


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
