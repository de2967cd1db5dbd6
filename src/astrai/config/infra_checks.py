"""Checks of the ``infra`` node (devices, parallelism, nodes, the container's settings and
environment), and ``plan_here``, the device plan of a job planned by this process. Before
anything starts."""

from __future__ import annotations

import os
import re

import torch
from omegaconf import DictConfig

from astrai.config.devices import CUDA_VISIBLE_DEVICES, DevicePlan, Where, infra_plan
from astrai.config.duration import parse_duration
from astrai.config.environment import reserved_reason
from astrai.config.errors import ConfigError, require
from astrai.config.ranges import check_number
from astrai.config.threads import parse_num_threads
from astrai.models.precision import PRECISIONS

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def plan_here(
    infra: DictConfig, where: Where = "host", cuda_count: int | None = None
) -> DevicePlan:
    """``astrai.config.devices.plan_devices`` for a job planned by this process: with its
    ``CUDA_VISIBLE_DEVICES`` and GPU count (``cuda_count``, default
    ``torch.cuda.device_count()``), neither of which applies to ``where="container"``."""
    if where == "container":
        return infra_plan(infra, where)
    return infra_plan(
        infra,
        where,
        cuda_visible_devices=os.environ.get(CUDA_VISIBLE_DEVICES),
        cuda_count=torch.cuda.device_count() if cuda_count is None else cuda_count,
    )


def _validate_environment(environment: DictConfig) -> None:
    """``infra.environment`` names: valid, and none the Docker CLI, compose, the image, the
    launcher or the trainer rely on (``astrai.config.environment``)."""
    for key in environment:
        name = str(key)
        require(
            ENV_NAME.fullmatch(name) is not None,
            f"infra.environment: {name!r} is not a valid environment variable name",
        )
        reason = reserved_reason(name)
        require(reason is None, f"infra.environment.{name} cannot be set per job: {reason}")


def validate_infra(infra: DictConfig, where: Where) -> None:
    """Raise ``ConfigError`` for the first invalid key of the ``infra`` node."""
    plan_here(infra, where)  # device, GPU indices and process count
    require(
        infra.parallel in ("ddp", "fsdp"),
        f"infra.parallel must be ddp or fsdp (got {infra.parallel!r})",
    )
    require(
        infra.precision in PRECISIONS,
        f"infra.precision must be fp32 or bf16 (got {infra.precision!r})",
    )
    check_number(infra.nnodes, "infra.nnodes", 1, integer=True)
    parse_num_threads(infra.num_threads)
    check_number(infra.node_rank, "infra.node_rank", 0, integer=True)
    require(
        infra.node_rank < infra.nnodes,
        f"infra.node_rank must be in [0, infra.nnodes) (got {infra.node_rank})",
    )
    require(
        infra.nnodes == 1 or bool(infra.rdzv_endpoint),
        "infra.rdzv_endpoint (host:port of node 0) is required when infra.nnodes > 1",
    )
    _validate_environment(infra.environment)
    require(
        not infra.environment or infra.name == "docker",
        f"infra.environment applies only to containers (infra=docker); under "
        f"infra={infra.name} set {', '.join(str(k) for k in infra.environment)} in the shell "
        "that starts the run",
    )
    for key in ("data", "models", "outputs"):
        value = infra.mounts[key]
        require(bool(value and str(value).strip()), f"infra.mounts.{key} must be a path")
    for key in ("image", "shm_size", "ipc", "stop_grace_period"):
        value = infra.container[key]
        require(bool(value and str(value).strip()), f"infra.container.{key} must not be empty")
    try:  # also the grace period of a multi-process run's workers on the host
        parse_duration(infra.container.stop_grace_period)
    except ValueError as err:
        raise ConfigError(f"infra.container.stop_grace_period: {err}") from None
