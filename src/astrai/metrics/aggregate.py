"""Running means of per-minibatch metrics over one update (torchmetrics ``MeanMetric``)."""

from __future__ import annotations

from collections import defaultdict

import torch
from torchmetrics.aggregation import MeanMetric


class MetricMeans:
    """Accumulates ``name -> scalar`` dicts, weighted, and reports the means."""

    def __init__(self) -> None:
        self._means: dict[str, MeanMetric] = defaultdict(MeanMetric)

    def update(self, metrics: dict[str, torch.Tensor | float], weight: float = 1.0) -> None:
        for name, value in metrics.items():
            value = torch.as_tensor(value, dtype=torch.float32).detach().cpu()
            self._means[name].update(value, weight)

    def compute(self) -> dict[str, float]:
        return {name: float(mean.compute()) for name, mean in self._means.items()}
