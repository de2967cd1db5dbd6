"""Running means of per-minibatch metrics over one update.

Plain float32 tensors, summed as torchmetrics' ``MeanMetric`` sums them (``value * weight``
and ``weight``, NaN values dropped with a warning, the sums added over ranks before dividing),
so the logged values are the same; without torchmetrics, whose import (2-3 s: it pulls in
transformers when installed) every run paid at start for these few additions.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist


class MetricMeans:
    """Accumulates ``name -> scalar`` dicts, weighted, and reports the means."""

    def __init__(self) -> None:
        # name -> float32 [2]: (sum of value * weight, sum of weight)
        self._sums: dict[str, torch.Tensor] = {}

    def update(self, metrics: dict[str, torch.Tensor | float], weight: float = 1.0) -> None:
        weight_t = torch.as_tensor(weight, dtype=torch.float32)
        for name, value in metrics.items():
            value_t = torch.as_tensor(value, dtype=torch.float32).detach().cpu()
            sums = self._sums.setdefault(name, torch.zeros(2, dtype=torch.float32))
            if torch.isnan(value_t) or torch.isnan(weight_t):
                warnings.warn(f"{name}: a NaN value was left out of its mean", stacklevel=2)
                continue
            sums[0] += value_t * weight_t
            sums[1] += weight_t

    def compute(self) -> dict[str, float]:
        """The weighted means, over every rank of a distributed run (one all-reduce)."""
        if not self._sums:
            return {}
        names = list(self._sums)
        sums = torch.stack([self._sums[name] for name in names])  # [metrics, 2]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(sums)  # a CPU tensor: gloo (the CUDA group has a gloo side too)
        return {
            name: float(total / weight) for name, (total, weight) in zip(names, sums, strict=True)
        }
