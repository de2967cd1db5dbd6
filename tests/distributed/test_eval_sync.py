"""A two-process evaluation reports the global metrics: every held-out problem weighs the same
whichever rank decoded it (``astrai.training.eval_metrics`` sums the totals over the ranks)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from tests.distributed.eval_worker import evaluate_on_two_ranks


@pytest.mark.slow  # 2 processes, each importing torch and torchmetrics
def test_two_ranks_report_the_global_eval_metrics(tmp_path: Path) -> None:
    mp.spawn(evaluate_on_two_ranks, args=(2, str(tmp_path)), nprocs=2, join=True)
    result = torch.load(tmp_path / "result.pt", weights_only=False)

    # own problems, 3 on rank 0 (rewards 1, 0, 0.5) and 1 on rank 1 (reward 1); correct at 1.0:
    # accuracy 2/4 = 0.5 (rank 0 alone: 1/3; the mean of the ranks' means: (1/3 + 1)/2 = 2/3),
    # reward_mean 2.5/4 = 0.625 (rank 0 alone 0.5; mean of means (0.5 + 1)/2 = 0.75); every
    # response is the 1 token max_new_tokens allows
    own = {"eval/accuracy": 0.5, "eval/reward_mean": 0.625, "eval/response_len": 1.0}
    assert [r["metrics"] for r in result["own"]] == [own, own]
    assert [r["rows"] for r in result["own"]] == [[3], [1]]

    # the shared list of 5 (rewards 1, 0, 0.5, 0, 1), split by evaluate: rank 0 decodes #0 #2
    # #4, rank 1 #1 #3 and a pad (#0 again, weight 0) so both run one batch of 3. accuracy 2/5
    # = 0.4 (with the pad counted 3/6), reward_mean 2.5/5 = 0.5 (with the pad 3.5/6)
    shared = {"eval/accuracy": 0.4, "eval/reward_mean": 0.5, "eval/response_len": 1.0}
    assert [r["metrics"] for r in result["shared"]] == [shared, shared]
    assert [r["rows"] for r in result["shared"]] == [[3], [3]]
    assert [r["prompts"] for r in result["shared"]] == [["0+0=", "2+0=", "4+0="], ["1+0=", "3+0="]]
