"""The evaluation's totals summed over ranks, by a torchmetrics ``Metric``.

``compute()`` gathers every rank's state when the run has several ranks
(``astrai.distributed.world_size``) and sums it, so a multi-rank evaluation reports the global
accuracy, mean reward and response length: each held-out problem weighs the same whichever
rank decoded it, where a mean of per-rank means would over-weigh the rank that held fewer.
``astrai.training.evaluation`` imports this module only when the run has several ranks:
torchmetrics' import (0.7 s measured on 2 busy cores, 2.5 s where
transformers is installed, which it then imports) is never paid at start-up nor by a one-process
run (``tests/test_lazy_imports.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric

from astrai.distributed import world_size


class RankTotals(Metric):
    """Running sums of a fixed vector of totals; ``compute()`` returns their sum over ranks.

    One state tensor, so a sync is one gather, not one per quantity.

    Args:
        size: the number of totals (the evaluation's: correct answers, rewards, response
            tokens, problems).
        ranks: the run's ranks (``astrai.distributed.world_size``): 1 syncs nothing, even
            where a process group exists (torchmetrics would gather over any initialised
            group, such as vLLM's own one-rank NCCL group on CUDA, which has no CPU backend).
    """

    full_state_update = False
    totals: Tensor

    def __init__(self, size: int, ranks: int) -> None:
        super().__init__(sync_on_compute=ranks > 1)
        # float64: sums of many rewards keep the digits a Python float sum has
        self.add_state(
            "totals", default=torch.zeros(size, dtype=torch.float64), dist_reduce_fx="sum"
        )

    def update(self, totals: Tensor) -> None:
        """Add ``totals`` (``[size]``) of this rank's batch."""
        self.totals += totals.to(self.totals)

    def compute(self) -> Tensor:
        """``[size]`` the sums over every rank (this rank's alone in a single process)."""
        return self.totals.clone()  # the synced state is put back to this rank's after


def sum_over_ranks(totals: Tensor) -> Tensor:
    """``totals`` (``[K]``) summed over ranks through ``RankTotals``; every rank must call it."""
    metric = RankTotals(totals.numel(), world_size())
    metric.update(totals)
    return metric.compute()
