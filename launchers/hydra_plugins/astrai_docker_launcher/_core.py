"""Run each job of a multirun in the container and collect its ``summary.json``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra_plugins.astrai_docker_launcher._environment import (
    compose_argv,
    compose_environment,
    container_overrides,
    container_plan,
    forwarded_names,
)
from omegaconf import DictConfig, OmegaConf, open_dict

if TYPE_CHECKING:
    from hydra_plugins.astrai_docker_launcher.docker_launcher import DockerLauncher

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
MOUNT_VARIABLES = {
    "data": "ASTRAI_DATA_DIR",
    "models": "ASTRAI_MODELS_DIR",
    "outputs": "ASTRAI_OUTPUTS_DIR",
}
JOB_LOG_FILE = "docker.log"


class DockerJobError(RuntimeError):
    """A job whose container exited non-zero or left no summary.json."""


def _repo_root() -> Path:
    """The astrai checkout the jobs run from (``conf/`` sits at its root)."""
    from astrai.paths import REPO_ROOT

    return REPO_ROOT


def _fail_before_launch(message: str, sweep_dir: Path) -> None:
    """One line on stderr, exit 2, and no sweep dir left behind that holds nothing but the
    ``multirun.yaml`` Hydra wrote before launching."""
    from astrai.files import discard_fresh_dir

    discard_fresh_dir(sweep_dir, {"multirun.yaml"})
    print(f"astrai: config error: {message}", file=sys.stderr)
    sys.exit(2)


def _check_job(job_config: DictConfig) -> str | None:
    """Validate a job's config on the host before any container starts (for the container:
    its GPUs are not this machine's to count); the error or None."""
    from astrai.config.validate import ConfigError, validate_config

    if job_config.infra.name != "docker":
        return (
            f"hydra/launcher=docker needs infra=docker (got infra={job_config.infra.name}): "
            "add infra=docker to the command line"
        )
    try:
        validate_config(job_config, where="container")
    except ConfigError as err:
        return str(err)
    return None


def _check_host(docker: str, infra: dict, repo_root: Path) -> str | None:
    """Mount sources must exist (compose.yaml will not create them) and the image must be
    present: ``docker compose run`` would otherwise build it, and only ``make docker-build``
    builds. Returns the error or None."""
    env = compose_environment(infra, os.environ, os.getuid(), os.getgid(), repo_root)
    for key, variable in MOUNT_VARIABLES.items():
        if not Path(env[variable]).is_dir():
            return (
                f"infra.mounts.{key}: {env[variable]} is not a directory "
                "(create it, or point the mount elsewhere)"
            )
    image = env["ASTRAI_IMAGE"]
    try:
        found = subprocess.run(
            [docker, "image", "inspect", image],
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return f"hydra.launcher.docker: {docker!r} not found on PATH"
    if found.returncode != 0:
        return f"infra.container.image: {image} is not available to Docker (run make docker-build)"
    return None


def launch(
    launcher: DockerLauncher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> list[JobReturn]:
    setup_globals()
    assert launcher.config is not None and launcher.hydra_context is not None
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    repo_root = _repo_root()
    sweep_dir = Path(str(config.hydra.sweep.dir))
    compose_file = (repo_root / launcher.compose_file).resolve()
    if not compose_file.is_file():
        message = f"hydra.launcher.compose_file: {compose_file} does not exist"
        _fail_before_launch(message, sweep_dir)

    # compose and validate every job before starting any container
    jobs = []
    for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
        job_config = launcher.hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(job_config):
            job_config.hydra.job.id = idx
            job_config.hydra.job.num = idx
        error = _check_job(job_config)
        if error is not None:
            _fail_before_launch(error, sweep_dir)
        jobs.append((idx, list(overrides), job_config))

    # the same infra for every job of the sweep is the common case; check each distinct one
    checked: set[str] = set()
    for _, _, job_config in jobs:
        infra = OmegaConf.to_container(job_config.infra, resolve=True)
        assert isinstance(infra, dict)
        key = json.dumps(infra, sort_keys=True)
        if key not in checked:
            checked.add(key)
            error = _check_host(launcher.docker, infra, repo_root)
            if error is not None:
                _fail_before_launch(error, sweep_dir)

    log.info("Launching %d jobs in Docker (%s)", len(jobs), compose_file)
    results = []
    for idx, overrides, job_config in jobs:
        HydraConfig.instance().set_config(job_config)
        results.append(_run_job(launcher, idx, overrides, job_config, repo_root, compose_file))
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    return results


def _run_job(
    launcher: DockerLauncher,
    idx: int,
    overrides: list[str],
    job_config: DictConfig,
    repo_root: Path,
    compose_file: Path,
) -> JobReturn:
    sweep = job_config.hydra.sweep
    job_dir = Path(str(sweep.dir), str(sweep.subdir)).resolve()
    job_dir.mkdir(parents=True, exist_ok=True)
    infra = OmegaConf.to_container(job_config.infra, resolve=True)
    assert isinstance(infra, dict)
    env = compose_environment(infra, os.environ, os.getuid(), os.getgid(), repo_root)
    plan = container_plan(infra)
    argv = compose_argv(
        launcher.docker,
        compose_file,
        launcher.service,
        forwarded_names(env, infra),
        job_dir,
        container_overrides(overrides, plan),
    )
    log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
    returncode, tail = _stream(argv, env, repo_root, job_dir / JOB_LOG_FILE, launcher.tail_lines)

    task_config = OmegaConf.masked_copy(job_config, [str(k) for k in job_config if k != "hydra"])
    result = JobReturn(
        overrides=overrides,
        cfg=task_config,
        hydra_cfg=job_config,
        working_dir=str(job_dir),
        task_name=job_config.hydra.job.name,
    )
    summary_path = job_dir / SUMMARY_FILE
    if returncode == 0 and summary_path.is_file():
        result.status = JobStatus.COMPLETED
        result.return_value = json.loads(summary_path.read_text())
        log.info("\t#%d : completed, %s", idx, summary_path)
    else:
        reason = f"exit code {returncode}" if returncode else f"no {SUMMARY_FILE} in {job_dir}"
        last = "\n".join(f"    {line}" for line in tail)
        message = f"job #{idx} failed ({reason}); last log lines:\n{last}"
        log.error("\t#%d : FAILED (%s)", idx, reason)
        result.status = JobStatus.FAILED
        result.return_value = DockerJobError(message)
    return result


def _stream(
    argv: list[str], env: dict[str, str], cwd: Path, log_file: Path, tail_lines: int
) -> tuple[int, list[str]]:
    """Run ``argv``, echo its output live and into ``log_file``; return (exit code, last
    ``tail_lines`` lines). A missing Docker CLI is exit code 127, as a shell would report."""
    tail: deque[str] = deque(maxlen=tail_lines)
    with open(log_file, "a", encoding="utf-8") as sink:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
        except FileNotFoundError as err:
            line = f"{argv[0]}: not found ({err})"
            sink.write(line + "\n")
            return 127, [line]
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sink.write(line)
            tail.append(line.rstrip("\n"))
        return proc.wait(), list(tail)
