"""Running means of per-minibatch metrics over one update.

Plain float32 tensors, summed as torchmetrics' ``MeanMetric`` sums them (``value * weight``
and ``weight``, NaN values dropped with a warning, the sums added over ranks before dividing),
so the logged values are the same; without torchmetrics, whose import (2-3 s: it pulls in
transformers when installed) every run paid at start for these few additions.

The sums live on each metric's own device and are read back once, in ``compute``: on a GPU an
``update`` never waits for the device (no ``.item()``, no ``.cpu()`` per minibatch).
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.distributed as dist


class MetricMeans:
    """Accumulates ``name -> scalar`` dicts, weighted, and reports the means."""

    def __init__(self) -> None:
        # name -> float32 [3] on the metric's device: (Σ value·weight, Σ weight, NaN values)
        self._sums: dict[str, torch.Tensor] = {}

    def update(self, metrics: dict[str, torch.Tensor | float], weight: float = 1.0) -> None:
        if math.isnan(weight):
            warnings.warn("a NaN weight: these metrics were left out of their means", stacklevel=2)
            return
        for name, value in metrics.items():
            value_t = torch.as_tensor(value, dtype=torch.float32).detach()
            sums = self._sums.get(name)
            if sums is None:
                sums = self._sums[name] = torch.zeros(3, device=value_t.device)
            nan = torch.isnan(value_t)
            zero = torch.zeros((), device=value_t.device)
            # the same float32 additions as before, a NaN adding exactly nothing
            sums[0] += torch.where(nan, zero, value_t * weight)
            sums[1] += torch.where(nan, zero, torch.ones((), device=value_t.device) * weight)
            sums[2] += nan.to(torch.float32)

    def compute(self) -> dict[str, float]:
        """The weighted means, over every rank of a distributed run (one all-reduce)."""
        if not self._sums:
            return {}
        names = list(self._sums)
        sums = torch.stack([self._sums[name].cpu() for name in names])  # [metrics, 3]
        for name, nans in zip(names, sums[:, 2].tolist(), strict=True):
            if nans:
                warnings.warn(f"{name}: a NaN value was left out of its mean", stacklevel=2)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(sums)  # a CPU tensor: gloo (the CUDA group has a gloo side too)
        return {
            name: float(total / weight)
            for name, (total, weight, _) in zip(names, sums, strict=True)
        }
