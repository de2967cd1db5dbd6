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
from collections.abc import Mapping

import torch
import torch.distributed as dist

from astrai.distributed import world_size


class MetricMeans:
    """Accumulates ``name -> scalar`` dicts, weighted, and reports the means.

    One update adds all its values at once: the values are stacked into one vector (on the
    device of the first tensor among them) and added to the running sums of the dicts with the
    same names, elementwise — the same float32 additions, per name, as one sum per name, in a
    handful of operations instead of a handful per name.
    """

    def __init__(self) -> None:
        # names of an update -> float32 [n, 3]: (Σ value·weight, Σ weight, NaN values) per name
        self._sums: dict[tuple[str, ...], torch.Tensor] = {}

    def update(self, metrics: Mapping[str, torch.Tensor | float], weight: float = 1.0) -> None:
        if math.isnan(weight):
            warnings.warn("a NaN weight: these metrics were left out of their means", stacklevel=2)
            return
        if not metrics:
            return
        names = tuple(metrics)
        device = next(
            (v.device for v in metrics.values() if isinstance(v, torch.Tensor)),
            torch.device("cpu"),
        )
        values = torch.stack(
            [
                torch.as_tensor(v, dtype=torch.float32, device=device).detach()
                for v in metrics.values()
            ]
        )  # [n]
        sums = self._sums.get(names)
        if sums is None:
            sums = self._sums[names] = torch.zeros(len(names), 3, device=device)
        nan = torch.isnan(values)
        zero = torch.zeros((), device=device)
        # the same float32 additions as before, a NaN adding exactly nothing
        sums[:, 0] += torch.where(nan, zero, values * weight)
        sums[:, 1] += torch.where(nan, zero, torch.ones((), device=device) * weight)
        sums[:, 2] += nan.to(torch.float32)

    def compute(self) -> dict[str, float]:
        """The weighted means, over every rank of a distributed run (one all-reduce)."""
        totals: dict[str, torch.Tensor] = {}
        for row_names, rows in self._sums.items():
            for name, row in zip(row_names, rows.cpu(), strict=True):
                totals[name] = totals[name] + row if name in totals else row
        if not totals:
            return {}
        names = list(totals)
        sums = torch.stack([totals[name] for name in names])  # [metrics, 3]
        for name, nans in zip(names, sums[:, 2].tolist(), strict=True):
            if nans:
                warnings.warn(f"{name}: a NaN value was left out of its mean", stacklevel=2)
        if world_size() > 1:
            dist.all_reduce(sums)  # a CPU tensor: gloo (the CUDA group has a gloo side too)
        return {
            name: float(total / weight)
            for name, (total, weight, _) in zip(names, sums, strict=True)
        }
