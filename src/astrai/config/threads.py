"""``infra.num_threads``: torch's intra-op threads per job, ``auto`` or a number.

``auto`` divides the machine's cores between the jobs a multirun runs side by side (the joblib
launcher's ``n_jobs``); a job that runs alone keeps torch's own default (all cores), so the
default run's results and speed do not change. Pure functions: the trainer's process applies
the count (``astrai.training.setup.apply_num_threads``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from astrai.config.errors import ConfigError

AUTO = "auto"


def parse_num_threads(value: Any) -> int | None:
    """``"auto"`` -> None; an int >= 1 -> itself; else ConfigError naming the key."""
    if value == AUTO:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return int(value)
    raise ConfigError(f"infra.num_threads must be 'auto' or an integer >= 1 (got {value!r})")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. under taskset or Slurm)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def joblib_parallel_jobs(n_jobs: int | None, cores: int) -> int:
    """How many jobs joblib runs at once for ``n_jobs`` on ``cores`` cores: None -> 1, a
    positive number -> itself, -1 -> all cores, -2 -> all but one, ... (joblib's convention),
    never below 1."""
    if n_jobs is None:
        return 1
    if n_jobs < 0:
        return max(1, cores + 1 + n_jobs)
    return max(1, n_jobs)


def launcher_parallel_jobs(launcher: Mapping[str, Any], multirun: bool, cores: int) -> int:
    """The jobs a multirun's launcher runs side by side: the joblib launcher's ``n_jobs``
    (any launcher config with an ``n_jobs`` key); 1 for any other launcher, and outside a
    multirun, where Hydra ignores ``hydra/launcher`` and runs the one job in-process."""
    if not multirun or "n_jobs" not in launcher:
        return 1
    return joblib_parallel_jobs(launcher["n_jobs"], cores)


def resolve_num_threads(setting: Any, cores: int, parallel_jobs: int, default: int) -> int:
    """The intra-op thread count of one job.

    Args:
        setting: ``infra.num_threads``: ``"auto"`` or an int >= 1 (used as it is).
        cores: the cores of the machine (``available_cores()``).
        parallel_jobs: the jobs running side by side (``launcher_parallel_jobs``).
        default: torch's own default in this process (``torch.get_num_threads()`` at start).

    Returns:
        ``auto``: ``default`` for a job that runs alone, else ``max(1, cores // parallel_jobs)``.
    """
    threads = parse_num_threads(setting)
    if threads is not None:
        return threads
    if parallel_jobs <= 1:
        return default
    return max(1, cores // parallel_jobs)
