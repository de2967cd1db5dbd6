"""What the launcher refuses before any container starts: a job whose config does not validate
for the container (``check_job``), and the jobs of a detached sweep that would share GPUs
(``shared_gpus_error``). Each returns the error line or None; the launch reports it."""

from __future__ import annotations

from hydra_plugins.astrai_docker_launcher._environment import (
    container_plan,
    log_options_error,
    shared_gpus,
)
from hydra_plugins.astrai_docker_launcher._job import Job
from omegaconf import DictConfig


def check_job(job_config: DictConfig) -> str | None:
    """Validate a job's config on the host before any container starts (for the container:
    its GPUs are not this machine's to count); the error or None."""
    from astrai.config.validate import ConfigError, validate_config

    if job_config.infra.name != "docker":
        return (
            f"hydra/launcher=docker needs infra=docker (got infra={job_config.infra.name}): "
            "add infra=docker to the command line"
        )
    nnodes = job_config.infra.nnodes
    if isinstance(nnodes, int) and nnodes > 1:
        # the container sits on compose's bridge network and publishes no rendezvous port, so
        # the nodes could never meet (and checked before validation, which asks for an
        # infra.rdzv_endpoint first: this is the reason that stands)
        return (
            f"infra.nnodes={nnodes}: multi-node Docker needs host networking, which "
            "hydra/launcher=docker does not support (run python train.py on each node)"
        )
    try:
        validate_config(job_config, where="container")
    except ConfigError as err:
        return str(err)
    return log_options_error(job_config.infra.container)


def shared_gpus_error(jobs: list[Job]) -> str | None:
    """A detached sweep starts every container at once: two GPU jobs whose GPUs overlap would
    train side by side on the same GPUs (``all``, the default, overlaps everything)."""
    pair = shared_gpus([container_plan(job.infra) for job in jobs])
    if pair is None:
        return None
    first, second = (jobs[position] for position in pair)
    return (
        f"hydra.launcher.detach=true starts every job at once, but jobs #{first.idx} and "
        f"#{second.idx} share GPUs (infra.gpu.devices={first.infra['gpu']['devices']} and "
        f"{second.infra['gpu']['devices']}): give each GPU job its own infra.gpu.devices "
        "(e.g. [0],[1]) or leave out detach"
    )
