"""One device plan: the device of each local rank, the process count, and what a child process
(an elastic worker, a container) must be told.

Everything that reads ``infra.device``, ``infra.gpu.devices`` or ``infra.nproc_per_node`` goes
through ``plan_devices`` (validation, ``python train.py``'s elastic launch, the trainer's device
and the Docker launcher), so an index means the same thing everywhere:

* An index counts the GPUs the planning process can see, as CUDA counts them: with
  ``CUDA_VISIBLE_DEVICES`` unset these are the machine's physical GPUs; with it set, positions in
  that list (``CUDA_VISIBLE_DEVICES=2,3`` and ``[1]`` select physical GPU 3). For a container
  (``where="container"``) they are the Docker engine's physical GPUs: compose reserves every GPU
  and the host's ``CUDA_VISIBLE_DEVICES`` never reaches the engine.
* Whoever narrows ``CUDA_VISIBLE_DEVICES`` to the selected GPUs tells the child
  ``infra.gpu.devices=all``: the child's GPU k is then the k-th selected one, and no process
  selects twice (``[1]`` would otherwise ask a container that sees one GPU for its GPU 1).
* ``CUDA_VISIBLE_DEVICES`` is never set to the empty string, which hides every GPU: ``None``
  means "set nothing". An inherited empty value means what CUDA makes of it: no GPU is visible.

Pure: the caller passes the inherited ``CUDA_VISIBLE_DEVICES`` and the visible device count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from omegaconf import ListConfig, OmegaConf

from astrai.config.errors import ConfigError

Where = Literal["host", "worker", "container"]
"""Who plans:

* ``host``: ``python train.py`` on this machine (or in its container), before any rank starts.
  One process trains in place; several are started as elastic workers, with
  ``CUDA_VISIBLE_DEVICES`` narrowed to a selected list.
* ``worker``: a process that already is local rank r (an elastic worker, a torchrun rank, a Slurm
  task, the single process of a run): it narrows nothing and uses ``local_devices[r]``.
* ``container``: the Docker launcher, for the container of one job. The host's
  ``CUDA_VISIBLE_DEVICES`` and GPU count do not apply; a list is always narrowed.
"""

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
ALL = "all"
NONE = "none"  # no GPU: the job runs on the CPU (in Docker: no GPU reservation either)


@dataclass(frozen=True)
class DevicePlan:
    """Where the local ranks of a job run and what a child process must be told.

    Attributes:
        device: ``"cpu"`` or ``"cuda"``; None when the container decides (``infra.device=auto``,
            planned from outside it).
        processes: processes on this machine (or in the container); None when the container
            counts its own GPUs (``infra.nproc_per_node=auto`` with ``infra.gpu.devices=all``).
        local_devices: the CUDA index local rank r uses, as the process that runs rank r sees
            it (after any narrowing below); ``()`` on CPU; None when unknown.
        cuda_visible_devices: the ``CUDA_VISIBLE_DEVICES`` a child must get; None = set
            nothing (an elastic worker keeps what it inherits, a container gets none). Never
            the empty string.
        gpu_devices: the ``infra.gpu.devices`` a child must be told: ``"all"`` whenever
            ``cuda_visible_devices`` narrows, else the value as given.
    """

    device: str | None
    processes: int | None
    local_devices: tuple[int, ...] | None
    cuda_visible_devices: str | None
    gpu_devices: str | tuple[int, ...]

    @property
    def narrows(self) -> bool:
        """True when the children get a narrowed ``CUDA_VISIBLE_DEVICES`` (and ``all``)."""
        return self.cuda_visible_devices is not None

    def rank_device(self, local_rank: int) -> int | None:
        """The CUDA index of ``local_rank``; None on CPU. ConfigError when the selection has
        fewer GPUs than there are local processes."""
        if self.device == "cpu":
            return None
        devices = self.local_devices or ()
        if not 0 <= local_rank < len(devices):
            raise ConfigError(
                f"infra.gpu.devices selects {len(devices)} GPU(s) ({_indices(devices)}) but this "
                f"is local rank {local_rank}: one GPU per process"
            )
        return devices[local_rank]


def parse_gpu_devices(devices: Any) -> list[int] | None:
    """``"all"`` -> None; ``"none"`` -> ``[]``; a list of distinct non-negative ints -> that
    list; else ConfigError."""
    if isinstance(devices, str) and devices == ALL:
        return None
    if isinstance(devices, str) and devices == NONE:
        return []
    if isinstance(devices, ListConfig):
        devices = OmegaConf.to_container(devices)
    _require(
        isinstance(devices, list | tuple) and len(devices) > 0,
        f"infra.gpu.devices must be 'all', 'none' or a non-empty list of GPU indices "
        f"(got {devices!r})",
    )
    for index in devices:
        _require(
            isinstance(index, int) and not isinstance(index, bool) and index >= 0,
            f"infra.gpu.devices entries must be non-negative integers (got {index!r})",
        )
    _require(
        len(set(devices)) == len(devices), f"infra.gpu.devices has duplicates: {list(devices)}"
    )
    return list(devices)


def parse_nproc_per_node(nproc: Any) -> int | None:
    """``"auto"`` -> None; a positive int -> itself; else ConfigError."""
    if nproc == "auto":
        return None
    _require(
        isinstance(nproc, int) and not isinstance(nproc, bool) and nproc >= 1,
        f"infra.nproc_per_node must be 'auto' or a positive integer (got {nproc!r})",
    )
    return int(nproc)


def parse_cuda_visible_devices(value: str | None) -> list[str] | None:
    """The inherited ``CUDA_VISIBLE_DEVICES``: None when unset, ``[]`` when empty (CUDA then
    shows no GPU), else its entries (indices, ``GPU-<uuid>`` or ``MIG-<uuid>``)."""
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",")] if value.strip() else []


def plan_devices(
    device: str,
    gpu_devices: Any,
    nproc_per_node: Any,
    *,
    cuda_visible_devices: str | None,
    cuda_count: int | None,
    where: Where,
) -> DevicePlan:
    """The device plan (see the module docstring for what an index means).

    Args:
        device: ``infra.device``: ``auto`` (CUDA when a GPU is visible), ``cpu`` or ``cuda``.
        gpu_devices: ``infra.gpu.devices``: ``all``, ``none`` (the CPU, whatever
            ``infra.device=auto`` would find) or a list of indices.
        nproc_per_node: ``infra.nproc_per_node``: ``auto`` (one process per selected GPU, one
            on CPU) or a number.
        cuda_visible_devices: the inherited ``CUDA_VISIBLE_DEVICES`` (None = unset); ignored for
            ``where="container"``.
        cuda_count: the CUDA devices this process sees (``torch.cuda.device_count()``);
            ignored for ``where="container"``, required otherwise.
        where: who plans: ``host``, ``worker`` or ``container`` (see ``Where``).

    Returns:
        The plan; ConfigError (one line naming the key) for a bad value, ``infra.device=cuda``
        without a visible GPU, an index beyond the visible GPUs, or more processes than
        selected GPUs.
    """
    _require(
        device in ("auto", "cpu", "cuda"),
        f"infra.device must be auto, cpu or cuda (got {device!r})",
    )
    selected = parse_gpu_devices(gpu_devices)
    given: str | tuple[int, ...] = ALL if selected is None else tuple(selected)
    nproc = parse_nproc_per_node(nproc_per_node)
    if selected == []:
        _require(
            device != "cuda",
            "infra.device=cuda but infra.gpu.devices=none selects no GPU "
            "(infra.device=cpu or infra.gpu.devices=none trains on the CPU)",
        )
        return DevicePlan("cpu", nproc or 1, (), None, NONE)
    if device == "cpu":
        return DevicePlan("cpu", nproc or 1, (), None, given)
    if where == "container":
        return _container_plan(device, selected, nproc)

    if cuda_count is None:
        raise ValueError(f"plan_devices(where={where!r}) needs the visible cuda_count")
    inherited = parse_cuda_visible_devices(cuda_visible_devices)
    visible = cuda_count if inherited is None else min(cuda_count, len(inherited))
    if visible == 0:
        _require(
            device == "auto",
            f"infra.device=cuda but no CUDA device is visible{_seen(inherited)} "
            "(infra.device=cpu or infra.gpu.devices=none trains on the CPU)",
        )
        return DevicePlan("cpu", nproc or 1, (), None, given)

    gpus = tuple(range(visible)) if selected is None else tuple(selected)
    beyond = [index for index in gpus if index >= visible]
    if beyond:
        raise ConfigError(
            f"infra.gpu.devices={list(gpus)} selects GPU {beyond[0]}, but only {visible} GPU(s) "
            f"are visible ({_indices(range(visible))}{_seen(inherited)})"
        )
    if where == "worker":  # the ranks exist already: rank r uses the r-th selected GPU
        return DevicePlan("cuda", nproc or len(gpus), gpus, None, given)
    processes = nproc or len(gpus)
    _check_processes(processes, len(gpus), selected)
    if processes == 1 or selected is None:  # in place, or workers that see what we see
        return DevicePlan("cuda", processes, gpus[:processes], None, given)
    entries = inherited if inherited is not None else [str(index) for index in range(visible)]
    narrowed = ",".join(entries[index] for index in gpus)
    return DevicePlan("cuda", processes, tuple(range(processes)), narrowed, ALL)


def _container_plan(device: str, selected: list[int] | None, nproc: int | None) -> DevicePlan:
    """The Docker launcher's plan: compose reserves every GPU, so a list is narrowed (physical
    indices of the engine's machine) and the container is told ``all``. The container's own
    GPUs are not countable from the host: with ``all`` and ``auto`` it counts them itself."""
    kind = "cuda" if device == "cuda" else None  # auto: the container decides
    if selected is None:
        local = tuple(range(nproc)) if nproc is not None else None
        return DevicePlan(kind, nproc, local, None, ALL)
    processes = nproc or len(selected)
    _check_processes(processes, len(selected), selected)
    narrowed = ",".join(str(index) for index in selected)
    return DevicePlan(kind, processes, tuple(range(processes)), narrowed, ALL)


def infra_plan(
    infra: Mapping[str, Any],
    where: Where,
    *,
    cuda_visible_devices: str | None = None,
    cuda_count: int | None = None,
) -> DevicePlan:
    """``plan_devices`` from an ``infra`` node (a DictConfig or a plain dict)."""
    return plan_devices(
        infra["device"],
        infra["gpu"]["devices"],
        infra["nproc_per_node"],
        cuda_visible_devices=cuda_visible_devices,
        cuda_count=cuda_count,
        where=where,
    )


def _check_processes(processes: int, gpus: int, selected: list[int] | None) -> None:
    what = f"infra.gpu.devices={selected} selects" if selected is not None else "there are"
    _require(
        processes <= gpus,
        f"infra.nproc_per_node={processes} but {what} {gpus} GPU(s): one GPU per process",
    )


def _indices(indices: Any) -> str:
    indices = list(indices)
    if not indices:
        return "none"
    if indices == list(range(len(indices))) and len(indices) > 1:
        return f"indices 0-{len(indices) - 1}"
    return "index " + ",".join(str(index) for index in indices)


def _seen(inherited: list[str] | None) -> str:
    if inherited is None:
        return ""
    if not inherited:
        return "; CUDA_VISIBLE_DEVICES is empty, which hides every GPU"
    return f" of CUDA_VISIBLE_DEVICES={','.join(inherited)}"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
