"""A process group the run did not make, of one rank (issue 59): vLLM on CUDA initialises one
inside the trainer (NCCL only, world size 1), after which ``torch.distributed.is_initialized()``
is true. A run decides whether it is distributed from its own world size
(``astrai.distributed``), so it evaluates and trains as a single process does, with no
collective over that group. The stand-in here is a CPU group whose only backend serves CUDA
tensors (``cuda:gloo``): a CPU tensor's collective fails on it as on vLLM's NCCL group."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from tests.helpers import compose_config
from tests.train_runs import QUICK

from astrai.distributed import rank, world_size
from astrai.metrics.aggregate import MetricMeans
from astrai.paths import REPO_ROOT

NO_CPU_BACKEND = "No backend type associated with device type cpu"


@pytest.fixture
def cuda_only_group(tmp_path: Path) -> Iterator[None]:
    """A default process group of one rank with a backend for CUDA tensors only."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("cuda:gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_the_stand_in_fails_a_cpu_collective_as_vllm_s_group_does(cuda_only_group: None) -> None:
    with pytest.raises(RuntimeError, match=NO_CPU_BACKEND):
        dist.all_reduce(torch.ones(1))
    assert dist.is_initialized() and (world_size(), rank()) == (1, 0)


def test_metric_means_reduce_nothing_over_a_one_rank_group(cuda_only_group: None) -> None:
    means = MetricMeans()
    means.update({"loss/policy": torch.tensor(1.0)})
    means.update({"loss/policy": torch.tensor(2.0)}, weight=3.0)
    assert means.compute() == {"loss/policy": pytest.approx((1.0 + 6.0) / 4.0)}


@pytest.mark.slow  # a Trainer's two steps and two evaluations in this process: ~2 s
def test_a_run_evaluates_and_trains_under_a_group_it_did_not_make(
    cuda_only_group: None, tmp_path: Path
) -> None:
    from astrai.training.run import Run

    # 2 steps, evaluated at step 0 and after step 2
    cfg = compose_config([*QUICK, "trainer.eval_every=2", "logger.tensorboard=false"])
    trainer = Run(cfg, tmp_path / "run")
    try:
        summary = trainer.fit()
    finally:
        trainer.close()
    assert summary["step"] == 2 and summary["stopped"] is None
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evaluated = [row["step"] for row in rows if "eval/accuracy" in row]
    trained = [row["step"] for row in rows if "loss/policy" in row]
    assert evaluated == [0, 2] and trained == [1, 2]
    assert dist.is_initialized()  # the group is still the caller's
    # the evaluation's cross-rank sum (torchmetrics, which gathers over any initialised group)
    # gathers nothing in a one-rank run, whoever calls it
    from astrai.training.eval_metrics import sum_over_ranks

    totals = torch.tensor([3.0, 1.5, 40.0, 8.0], dtype=torch.float64)
    assert torch.equal(sum_over_ranks(totals), totals)


def test_only_astrai_distributed_asks_whether_a_process_group_exists() -> None:
    """``make lint``'s rule, read from the sources: elsewhere ``world_size()`` decides."""
    asking = re.compile(r"dist(ributed)?\.is_initialized")
    found = [
        f"{path.relative_to(REPO_ROOT)}:{number}"
        for path in sorted((REPO_ROOT / "src").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if asking.search(line)
    ]
    assert {place.split(":")[0] for place in found} == {"src/astrai/distributed.py"}, found
