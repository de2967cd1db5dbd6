"""Process-group helpers: one code path for one process and for many (torchrun, elastic).

A run is distributed when ``WORLD_SIZE`` > 1 in the environment (set by torchrun or PyTorch's
elastic launcher): ``init_distributed`` then joins a process group of that many ranks. The
reductions below are identity functions in a single process, so the algorithms call them
unconditionally.

Whether a run is distributed is decided here alone (``world_size``, ``rank``), never by
``torch.distributed.is_initialized()`` elsewhere (``make lint`` refuses it outside this module):
a process group may exist in one process too. vLLM on CUDA initialises one of its own, NCCL
only and of one rank, inside the trainer; a collective on it would fail every CPU tensor ("No
backend type associated with device type cpu") and has nothing to sum anyway.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, MutableMapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


def as_dtensor(tensor: object) -> Any | None:
    """``tensor`` when it is an FSDP ``DTensor``, else None. ``torch.distributed.tensor`` is
    looked up, not imported: importing it costs ~0.6 s of every process's start (measured), and
    no tensor is a DTensor before FSDP, which imports it, made one."""
    module = sys.modules.get("torch.distributed.tensor")
    return tensor if module is not None and isinstance(tensor, module.DTensor) else None


@dataclass(frozen=True)
class DistContext:
    """This process's place in the job."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes logs, TensorBoard, checkpoints and ``summary.json``."""
        return self.rank == 0


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm node list: ``"gpu[03-05,9],cpu1"`` -> ``"gpu03"``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]*)\])?", nodelist.strip())
    if match is None:
        raise ValueError(f"not a Slurm node list: {nodelist!r}")
    prefix, ranges = match.groups()
    return prefix if ranges is None else prefix + ranges.split(",")[0].split("-")[0]


def slurm_environment(environ: dict[str, str]) -> dict[str, str]:
    """torch.distributed's variables from a Slurm task's (one process per task, as
    hydra-submitit-launcher starts them; no torchrun inside Slurm)."""
    return {
        "RANK": environ["SLURM_PROCID"],
        "LOCAL_RANK": environ["SLURM_LOCALID"],
        "WORLD_SIZE": environ["SLURM_NTASKS"],
        "MASTER_ADDR": environ.get("MASTER_ADDR")
        or first_slurm_host(environ["SLURM_JOB_NODELIST"]),
        "MASTER_PORT": environ.get("MASTER_PORT") or str(slurm_port(environ)),
    }


def slurm_port(environ: dict[str, str]) -> int:
    """The rendezvous port of a Slurm job: one per job id (20000-39999), so two jobs whose first
    node is the same host (a sweep's array tasks sharing a node) do not both bind torch's
    default 29500; 29500 without a job id."""
    job_id = environ.get("SLURM_JOB_ID", "")
    return 20000 + int(job_id) % 20000 if job_id.isdigit() else 29500


def apply_slurm_environment(
    infra_name: str, environ: MutableMapping[str, str] = os.environ
) -> None:
    """Under ``infra=slurm``, give a Slurm task torch.distributed's variables (``RANK`` ...)
    before anything asks for its rank: the run dir's lock and log files are rank 0's, and
    without them every task would take itself for rank 0."""
    if infra_name == "slurm" and "SLURM_PROCID" in environ:
        environ.update(slurm_environment(dict(environ)))


def env_context(environ: dict[str, str] | None = None) -> DistContext:
    """``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` from the environment (torchrun sets them);
    a plain ``python train.py`` is rank 0 of 1."""
    env = os.environ if environ is None else environ
    world = int(env.get("WORLD_SIZE", "1"))
    rank = int(env.get("RANK", "0"))
    local = int(env.get("LOCAL_RANK", str(rank)))
    if world < 1 or not 0 <= rank < world:
        raise RuntimeError(f"bad distributed environment: RANK={rank} WORLD_SIZE={world}")
    return DistContext(rank=rank, local_rank=local, world_size=world)


def process_group_backend(device_type: str) -> str:
    """The process group's backend for a run on ``device_type``.

    On CUDA, NCCL serves CUDA tensors and gloo the CPU ones: the trainer reduces small CPU
    tensors too (the stop vote, logged metrics, object gathers), and a group registered for
    CUDA only fails them with "No backend type associated with device type cpu".
    """
    return "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"


def init_distributed(device: torch.device) -> DistContext:
    """Join the process group described by the environment (``process_group_backend``); a
    single process joins nothing."""
    ctx = env_context()
    if ctx.world_size > 1 and not process_group_exists():
        backend = process_group_backend(device.type)
        dist.init_process_group(backend=backend, timeout=timedelta(minutes=30))
    return ctx


def process_group_exists() -> bool:
    """Whether this process holds a default process group: the job's (``init_distributed``), or
    one made for this process alone (vLLM's on CUDA, a library's). Not whether the run is
    distributed: that is ``world_size() > 1``."""
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """The ranks this run's collectives run over: the process group's size, 1 without one (a
    one-rank group, such as vLLM's own, is one process: no collective runs)."""
    return dist.get_world_size() if process_group_exists() else 1


def rank() -> int:
    """This process's rank among ``world_size()`` (0 in a single process)."""
    return dist.get_rank() if world_size() > 1 else 0


def all_reduce_sum(tensor: Tensor) -> Tensor:
    """Sum of ``tensor`` over ranks (a detached copy; the input is untouched)."""
    out = tensor.detach().clone()
    if world_size() > 1:
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def all_reduce_max(value: float) -> float:
    out = torch.tensor([value], dtype=torch.float64)
    if world_size() > 1:
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return float(out.item())


def gather_objects(obj: object) -> list[object]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if world_size() == 1:
        return [obj]
    gathered: list[object] = [None] * world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def no_grad_for(model: torch.nn.Module) -> Callable[[], AbstractContextManager[Any]]:
    """How a scoring pass over ``model`` (π_old; the reference, for a LoRA run the policy with
    its adapters off) turns gradients off: ``torch.no_grad`` for an FSDP-sharded model, whose
    unsharded weights must not become inference tensors its next training forward writes
    into; ``torch.inference_mode`` otherwise (``algorithms.strategy.NoGradMode``)."""
    return torch.no_grad if is_fsdp(model) else torch.inference_mode


def is_fsdp(module: torch.nn.Module) -> bool:
    """Whether ``module`` holds FSDP-sharded submodules: it gathers its weights inside its
    modules' calls, collectives every rank must join with the same calls."""
    if not dist.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in module.modules())


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()
