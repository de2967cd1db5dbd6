"""Start the worker processes of a multi-process run with PyTorch's own elastic launcher.

``python train.py infra.nproc_per_node=2`` (or ``auto`` with several selected GPUs) composes the
config once, in this process, then hands the resolved config and the one run dir to
``torch.distributed.launcher.elastic_launch`` — the engine behind ``torchrun`` — so all ranks
share one run dir and one ``.hydra/``. Under ``torchrun`` itself (``WORLD_SIZE`` set), nothing is
launched: the process already is a worker.

Stopping: this process is the one that gets SIGTERM/SIGINT (``docker stop``, ``kill``, Ctrl-C).
Torch elastic's own handling of them raises here (exit 1 although the workers stopped
cleanly) and SIGKILLs the workers 30 s later, so the launch keeps only SIGHUP/SIGQUIT for
elastic and forwards SIGTERM/SIGINT itself (``StopForwarder``): the workers finish their
step, write the checkpoint and return as usual, rank 0's summary says ``stopped: SIGTERM`` and
the exit code is 0. Workers still running ``infra.container.stop_grace_period`` after the
signal (the same grace ``docker stop`` gives the container) are killed, and the launch fails.

Logging: the workers are spawned, so they have neither Hydra's config nor its log handlers. They
get the job's overrides and group choices (for the start banner and the HParams record), and
rank 0 appends to the run's log files (``train.log``) with the same format, so the banner and the
per-evaluation lines reach ``train.log`` as in a one-process run.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from astrai.config.devices import CUDA_VISIBLE_DEVICES
from astrai.config.duration import parse_duration
from astrai.config.validate import ConfigError, plan_here
from astrai.metrics.dashboards import hydra_job_context
from astrai.training.setup import apply_num_threads
from astrai.training.stop_forwarder import StopForwarder
from astrai.training.worker_errors import quiet_elastic, report_worker_error, worker_error

log = logging.getLogger(__name__)

# the signals torch elastic handles in the launcher (shut the workers down, then raise);
# SIGTERM and SIGINT are StopForwarder's
ELASTIC_SIGNALS = "SIGHUP,SIGQUIT"


def processes_per_node(infra: DictConfig, cuda_count: int | None = None) -> int:
    """``infra.nproc_per_node`` as a number: ``auto`` = the selected GPUs when training on CUDA
    (all visible ones for ``devices: all``), 1 on CPU (the host's device plan)."""
    processes = plan_here(infra, "host", cuda_count).processes
    assert processes is not None  # only a container's plan leaves the count to the container
    return processes


def inside_worker(environ: dict[str, str] | None = None) -> bool:
    """True under torchrun / an elastic launch (the process is already one rank)."""
    env = os.environ if environ is None else environ
    return "WORLD_SIZE" in env and "LOCAL_RANK" in env


def needs_launch(infra: DictConfig) -> bool:
    return not inside_worker() and (processes_per_node(infra) > 1 or infra.nnodes > 1)


def launch_workers(cfg: DictConfig, run_dir: Path) -> dict[str, object]:
    """Run ``training.run.fit`` on every rank; return rank 0's summary (its
    ``stopped`` says why the run ended: ``SIGTERM`` when this process was signalled)."""
    infra = cfg.infra
    grace_s = stop_grace_s(infra)
    nproc = processes_per_node(infra)
    plan = plan_here(infra, "host")
    visible_before = os.environ.get(CUDA_VISIBLE_DEVICES)
    if plan.narrows:  # rank r then uses cuda:r; whoever narrows tells the workers "all"
        os.environ[CUDA_VISIBLE_DEVICES] = str(plan.cuda_visible_devices)
        cfg = copy.deepcopy(cfg)
        cfg.infra.gpu.devices = plan.gpu_devices
    try:
        return _launch(cfg, run_dir, nproc, grace_s)
    finally:
        # the spawned workers have read it; the next job of a sequential sweep plans its own
        # GPUs from what the user gave, not from this job's narrowing
        restore_variable(CUDA_VISIBLE_DEVICES, visible_before)


def restore_variable(name: str, value: str | None) -> None:
    """Set environment variable ``name`` back to ``value`` (None: unset it)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _launch(cfg: DictConfig, run_dir: Path, nproc: int, grace_s: float) -> dict[str, object]:
    """``launch_workers`` once the workers' GPUs are set: the elastic launch itself."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    infra = cfg.infra
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
        signals_to_handle=ELASTIC_SIGNALS,
    )
    resolved = OmegaConf.to_yaml(cfg, resolve=True)
    log.info("launching %d processes per node on %d node(s)", nproc, infra.nnodes)
    job_context = hydra_job_context()
    errors = Path(tempfile.mkdtemp(prefix="astrai-launch-"))  # the workers' known errors
    try:
        with StopForwarder(grace_s), quiet_elastic(errors):
            results = elastic_launch(config, run_worker)(
                resolved, str(run_dir), job_context, log_files(), str(errors)
            )
    except ChildFailedError as failed:
        known = worker_error(errors, failed.get_first_failure()[0])
        if known is None:  # not one of astrai's one-line errors: elastic's report stands
            raise
        raise known from None  # the one line a one-process run would print
    finally:
        shutil.rmtree(errors, ignore_errors=True)
    summary = results.get(0)
    if summary is None:  # another node holds global rank 0
        return {"step": None, "worker": "not rank 0"}
    return summary


def stop_grace_s(infra: DictConfig) -> float:
    """``infra.container.stop_grace_period`` in seconds (``300s``, ``5m``, ``1m30s``)."""
    try:
        return parse_duration(infra.container.stop_grace_period)
    except ValueError as err:
        raise ConfigError(f"infra.container.stop_grace_period: {err}") from None


LogFile = tuple[str, str | None, str | None]  # path, format, date format


def log_files() -> list[LogFile]:
    """The root logger's files (Hydra's ``<job name>.log``) with their formats, for workers."""
    files = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            formatter = handler.formatter
            fmt = None if formatter is None else formatter._fmt
            datefmt = None if formatter is None else formatter.datefmt
            files.append((handler.baseFilename, fmt, datefmt))
    return files


def run_worker(
    resolved_config: str,
    run_dir: str,
    job_context: tuple[list[str], dict[str, object]] | None = None,
    files: list[LogFile] | None = None,
    errors: str | None = None,
) -> dict[str, Any] | None:
    """One rank: the trainer on the shared run dir. Rank 0 returns the summary.

    Args:
        resolved_config: the job's resolved config as YAML.
        run_dir: the shared run dir.
        job_context: the launcher's Hydra overrides and group choices.
        files: log files rank 0 appends to (``log_files()`` of the launcher).
        errors: the launch's folder for a known error's one line (``worker_errors``).
    """
    from astrai.training.run import fit

    # a session of its own, as torchrun gives its workers: a terminal's Ctrl-C (sent to the
    # whole foreground process group) then reaches the launcher alone, which forwards it once;
    # a second delivery would count as a second signal and kill the worker at once
    os.setsid()
    logging.basicConfig(level=logging.INFO, format="[rank %(process)d][%(name)s] %(message)s")
    if os.environ.get("RANK", "0") == "0":
        for path, fmt, datefmt in files or []:
            # appends as the launcher's handler does: each record is flushed as it is written
            handler = logging.FileHandler(path, mode="a")
            handler.setFormatter(logging.Formatter(fmt, datefmt))
            logging.getLogger().addHandler(handler)
    cfg = OmegaConf.create(resolved_config)
    assert isinstance(cfg, DictConfig)
    # a number is every rank's own count; auto: torch's default, as each rank had before
    apply_num_threads(cfg.infra.num_threads)
    try:
        summary = fit(cfg, run_dir, job_context)
    except Exception as err:
        if errors is not None:
            report_worker_error(Path(errors), err)
        raise  # elastic fails the launch (and stops the other workers)
    return summary if os.environ.get("RANK", "0") == "0" else None
