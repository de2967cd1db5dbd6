"""Start the worker processes of a multi-process run with PyTorch's own elastic launcher.

``python train.py infra.nproc_per_node=2`` (or ``auto`` with several selected GPUs) composes the
config once, in this process, then hands the resolved config and the one run dir to
``torch.distributed.launcher.elastic_launch`` — the engine behind ``torchrun`` — so all ranks
share one run dir and one ``.hydra/``. Under ``torchrun`` itself (``WORLD_SIZE`` set), nothing is
launched: the process already is a worker.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from astrai.config.validate import parse_gpu_devices

log = logging.getLogger(__name__)


def processes_per_node(infra: DictConfig, cuda_count: int | None = None) -> int:
    """``infra.nproc_per_node`` as a number: ``auto`` = the selected GPUs when training on CUDA
    (all visible ones for ``devices: all``), 1 on CPU."""
    if infra.nproc_per_node != "auto":
        return int(infra.nproc_per_node)
    count = torch.cuda.device_count() if cuda_count is None else cuda_count
    on_cuda = infra.device == "cuda" or (infra.device == "auto" and count > 0)
    if not on_cuda:
        return 1
    devices = parse_gpu_devices(infra.gpu.devices)
    return len(devices) if devices is not None else max(count, 1)


def inside_worker(environ: dict[str, str] | None = None) -> bool:
    """True under torchrun / an elastic launch (the process is already one rank)."""
    env = os.environ if environ is None else environ
    return "WORLD_SIZE" in env and "LOCAL_RANK" in env


def needs_launch(infra: DictConfig) -> bool:
    return not inside_worker() and (processes_per_node(infra) > 1 or infra.nnodes > 1)


def launch_workers(cfg: DictConfig, run_dir: Path) -> dict[str, object]:
    """Run ``Trainer(cfg, run_dir).fit()`` on every rank; return rank 0's summary."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    infra = cfg.infra
    nproc = processes_per_node(infra)
    devices = parse_gpu_devices(infra.gpu.devices)
    if devices is not None and infra.device != "cpu":
        # physical indices -> visible ones: rank r then uses cuda:r
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in devices)
    single_node = infra.nnodes == 1 and not infra.rdzv_endpoint
    config = LaunchConfig(
        min_nodes=infra.nnodes,
        max_nodes=infra.nnodes,
        nproc_per_node=nproc,
        run_id=infra.rdzv_id or (uuid.uuid4().hex if single_node else "astrai"),
        rdzv_backend="c10d",
        rdzv_endpoint=infra.rdzv_endpoint or "localhost:0",
        rdzv_configs={"rank": infra.node_rank} if not single_node else {},
        max_restarts=0,
        start_method="spawn",
    )
    resolved = OmegaConf.to_yaml(cfg, resolve=True)
    log.info("launching %d processes per node on %d node(s)", nproc, infra.nnodes)
    results = elastic_launch(config, run_worker)(resolved, str(run_dir))
    summary = results.get(0)
    if summary is None:  # another node holds global rank 0
        return {"step": None, "worker": "not rank 0"}
    return summary


def run_worker(resolved_config: str, run_dir: str) -> dict[str, Any] | None:
    """One rank: the trainer on the shared run dir. Rank 0 returns the summary."""
    from astrai.training.trainer import Trainer

    logging.basicConfig(level=logging.INFO, format="[rank %(process)d][%(name)s] %(message)s")
    cfg = OmegaConf.create(resolved_config)
    assert isinstance(cfg, DictConfig)
    trainer = Trainer(cfg, run_dir)
    trainer.save_config()
    summary = trainer.fit()
    return summary if trainer.dist.is_main else None
