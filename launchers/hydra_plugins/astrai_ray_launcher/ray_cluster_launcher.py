"""``hydra/launcher=ray_cluster`` (conf/hydra/launcher/ray_cluster.yaml): hydra-ray-launcher's
``RayLauncher``, each job one Ray task on an existing cluster, but for a lost job.

The plugin ``ray.get``s the jobs' results in job order, so a job whose task Ray could not finish
(its node died, its worker process ended) raised in the sweep's process as soon as the sweep
reached it, and that process's exit ended every later job still running or queued on the cluster.
Here the sweep waits for every job, logs each lost one with its number and overrides, and then
fails as Hydra fails a sweep with a failed job (the first one's error, exit 1); the same command
with the same ``hydra.sweep.dir`` resumes the lost jobs from their checkpoints. A lost job's dir
gets that line in ``ray_launcher.log`` (Hydra's log format, ``ERROR``), so ``astrai.report``
shows it ``failed`` rather than ``running``; the next launch of the job removes it.

Hydra imports every ``hydra_plugins`` module when it starts: without hydra-ray-launcher
(the ``ray`` extra, then hydra-ray-launcher ``--no-deps``: docs/scaling.md) this one defines no
launcher and imports nothing more.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from omegaconf import open_dict

log = logging.getLogger(__name__)
LOST_LOG = "ray_launcher.log"  # in a lost job's dir: the line that says it was lost


class JobLost(RuntimeError):
    """A job whose Ray task ended without the job's result (one line: the job, Ray's error)."""


def lost_job_message(idx: int, overrides: Sequence[str], error: BaseException) -> str:
    """The line that names a lost job: its number, overrides and Ray's error (first line)."""
    ray_error = (str(error).strip().splitlines() or [""])[0]
    return (
        f"job {idx} ({' '.join(filter_overrides(overrides))}) did not finish: "
        f"{type(error).__name__}: {ray_error} The same command with the same hydra.sweep.dir "
        "resumes it from its last checkpoint."
    )


def record_lost_job(job_dir: Path, message: str) -> None:
    """``message`` as an ``ERROR`` line of ``job_dir/ray_launcher.log``, in Hydra's format."""
    job_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with (job_dir / LOST_LOG).open("a", encoding="utf-8") as handle:
        handle.write(f"[{stamp},000][{__name__}][ERROR] - {message}\n")


def _submit(
    launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> tuple[list, list[Path]]:
    """The plugin's ``_core.launch`` up to its ``ray.get``s: one Ray task a job, in order; the
    tasks and the jobs' dirs (each cleared of an earlier launch's ``ray_launcher.log``)."""
    from hydra_plugins.hydra_ray_launcher._launcher_util import launch_job_on_ray, start_ray

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    log.info(f"Ray Launcher is launching {len(job_overrides)} jobs, sweep output dir: {sweep_dir}")
    launcher.ray_cfg.init.setdefault("object_store_memory", 78643200)  # as the plugin does
    start_ray(launcher.ray_cfg.init)
    runs, job_dirs = [], []
    for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
        log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
        sweep_config = launcher.hydra_context.config_loader.load_sweep_config(
            launcher.config, list(overrides)
        )
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = f"job_id_for_{idx}"
            sweep_config.hydra.job.num = idx
        job_dirs.append(sweep_dir / str(sweep_config.hydra.sweep.subdir))
        (job_dirs[-1] / LOST_LOG).unlink(missing_ok=True)
        runs.append(
            launch_job_on_ray(
                launcher.hydra_context,
                launcher.ray_cfg.remote,
                sweep_config,
                launcher.task_function,
                Singleton.get_state(),
            )
        )
    return runs, job_dirs


def _collect(
    runs: list,
    job_dirs: list[Path],
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
) -> list:
    """Every job's ``JobReturn`` once all have ended; a lost job's is a failure (``JobLost``)."""
    import ray

    ray.wait(runs, num_returns=len(runs))  # every job ended, with a result or lost
    returns = []
    for idx, (run, overrides) in enumerate(zip(runs, job_overrides, strict=True)):
        try:
            returns.append(ray.get(run))
        except ray.exceptions.RayError as err:  # a job's own exception is in its JobReturn
            message = lost_job_message(initial_job_idx + idx, overrides, err)
            log.error(message)
            record_lost_job(job_dirs[idx], message)
            lost = JobLost(message)
            returns.append(
                JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=lost)
            )
    return returns


if importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is not None:
    from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher

    class RayClusterLauncher(RayLauncher):
        """hydra-ray-launcher's ``RayLauncher`` that waits for every job (module docstring)."""

        def launch(
            self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
        ) -> Sequence[JobReturn]:
            assert self.config is not None and self.hydra_context is not None
            runs, job_dirs = _submit(self, job_overrides, initial_job_idx)
            return _collect(runs, job_dirs, job_overrides, initial_job_idx)
