"""Run each job of a multirun in the container and collect its ``summary.json``.

Before any container starts: every job is composed and validated, the mount folders are made,
and ``docker/preflight.py`` checks the host for the jobs' image, mounts and GPU need (engine,
Compose, NVIDIA runtime, image: the first failure names its cause). A named job
(``hydra.launcher.job_name``) gets a stable run dir under the outputs mount and a container of
the same name, so the same command resumes it; ``hydra.launcher.detach`` starts its containers
and returns. The host side (user, compose environment, mounts, preflight) is ``_host``; the
checks of the jobs themselves are ``_job_checks``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra_plugins.astrai_docker_launcher._docker_cli import (
    DockerCallError,
    SignalRelay,
    docker_output,
    stream_to_log,
)
from hydra_plugins.astrai_docker_launcher._environment import (
    JOB_FILE,
    compose_argv,
    compose_files,
    container_name,
    container_overrides,
    container_plan,
    forwarded_names,
    job_name_error,
    named_job_dir,
    unforwarded_host_variables,
)
from hydra_plugins.astrai_docker_launcher._host import (
    HostError,
    container_ids,
    job_environment,
    launching_user,
    make_dirs,
    prepare_mounts,
    run_preflight,
)
from hydra_plugins.astrai_docker_launcher._job import Job, LauncherSettings
from hydra_plugins.astrai_docker_launcher._job_checks import check_job, shared_gpus_error
from omegaconf import OmegaConf, open_dict

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
JOB_LOG_FILE = "docker.log"
SWEEP_FILE = "multirun.yaml"  # what Hydra writes into the sweep dir before launching


class DockerJobError(SystemExit):
    """A job whose container exited non-zero or left no readable summary.json. The launcher
    prints the report (exit code, last log lines) when the job ends; this is what the sweep
    raises when it reads the job's result: exit 2 without a Python traceback (a
    ``SystemExit``, which Hydra's error reporting lets pass; Hydra first names the job's
    overrides in one line). ``str()`` is the report."""

    def __init__(self, report: str) -> None:
        super().__init__(report)
        self.code = 2


def _repo_root() -> Path:
    """The astrai checkout the jobs run from (``conf/`` sits at its root)."""
    from astrai.paths import REPO_ROOT

    return REPO_ROOT


def _fail_before_launch(message: str, sweep_dir: Path, kind: str = "config error") -> NoReturn:
    """One line on stderr, exit 2, and no sweep dir left behind that holds nothing but the
    ``multirun.yaml`` Hydra wrote before launching."""
    from astrai.files import discard_fresh_dir

    discard_fresh_dir(sweep_dir, {SWEEP_FILE})
    print(f"astrai: {kind}: {message}", file=sys.stderr)
    sys.exit(2)


def _free_container_name(launcher: LauncherSettings, job: Job, repo_root: Path) -> None:
    """A named job's container must not be running; a finished one (kept for its logs and exit
    code) or one that never started is removed so the new one can take its name."""
    assert job.container is not None
    env = job_environment(job.infra, repo_root)
    state = docker_output(
        launcher.docker,
        *("ps", "-a", "--filter", f"name=^/{job.container}$", "--format", "{{.State}}"),
        env=env,
    ).strip()
    if state in ("running", "restarting", "paused"):
        name = launcher.job_name
        raise HostError(
            f"hydra.launcher.job_name={name}: container {job.container} is {state} "
            f"(make docker-logs NAME={name}, make docker-stop NAME={name})"
        )
    if state:
        docker_output(launcher.docker, "rm", job.container, env=env)


def _place_named_jobs(
    launcher: LauncherSettings, jobs: list[Job], sweep_dir: Path, repo_root: Path
) -> None:
    """Give each job of a named launch its stable run dir and container name; a named dir that
    holds the other kind (a single run where a sweep goes, or the reverse) is refused. A named
    sweep's dir takes Hydra's ``multirun.yaml``."""
    name = launcher.job_name
    assert name is not None
    sweep = len(jobs) > 1 or jobs[0].idx > 0
    for job in jobs:
        top = Path(job_environment(job.infra, repo_root)["ASTRAI_OUTPUTS_DIR"]) / name
        if sweep and (top / ".hydra").is_dir():
            raise HostError(
                f"hydra.launcher.job_name={name}: {top} holds a single run, not a sweep "
                "(pick another name)"
            )
        if not sweep and (top / SWEEP_FILE).is_file():
            raise HostError(
                f"hydra.launcher.job_name={name}: {top} holds a sweep, not a single run "
                "(pick another name, or run the sweep again)"
            )
        job.job_dir = named_job_dir(top.parent, name, job.idx, sweep)
        job.container = container_name(launching_user()[1], name, job.idx, sweep)
        with open_dict(job.config):
            job.config.hydra.sweep.dir = str(top)
            job.config.hydra.sweep.subdir = str(job.idx) if sweep else "."
        if sweep and (sweep_dir / SWEEP_FILE).is_file():
            make_dirs(top)
            shutil.copyfile(sweep_dir / SWEEP_FILE, top / SWEEP_FILE)


def launch(
    launcher: LauncherSettings, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> list[JobReturn]:
    setup_globals()
    assert launcher.config is not None and launcher.hydra_context is not None
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    repo_root = _repo_root()
    sweep_dir = Path(str(config.hydra.sweep.dir))
    compose_file = (repo_root / launcher.compose_file).resolve()
    cpu_compose_file = (repo_root / launcher.cpu_compose_file).resolve()
    for key, path in (("compose_file", compose_file), ("cpu_compose_file", cpu_compose_file)):
        if not path.is_file():
            _fail_before_launch(f"hydra.launcher.{key}: {path} does not exist", sweep_dir)
    if launcher.job_name is not None:
        error = job_name_error(str(launcher.job_name))
        if error is not None:
            _fail_before_launch(error, sweep_dir)
    elif launcher.detach:
        _fail_before_launch(
            "hydra.launcher.detach=true needs hydra.launcher.job_name (make docker-train "
            "NAME=... DETACH=1): a name to find the job again",
            sweep_dir,
        )

    jobs = _compose_jobs(launcher, job_overrides, initial_job_idx, sweep_dir)
    files_of = {
        job.idx: compose_files(compose_file, cpu_compose_file, container_plan(job.infra))
        for job in jobs
    }
    if launcher.detach:
        error = shared_gpus_error(jobs)
        if error is not None:
            _fail_before_launch(error, sweep_dir)

    try:
        container_ids()
        for job in jobs:
            prepare_mounts(job.infra, repo_root)
        run_preflight(jobs, files_of, repo_root)
        if launcher.preflight_only:
            from astrai.files import discard_fresh_dir

            discard_fresh_dir(sweep_dir, {SWEEP_FILE})
            print(f"preflight: ok ({len(jobs)} job(s))")
            sys.exit(0)
        if launcher.job_name is not None:
            _place_named_jobs(launcher, jobs, sweep_dir, repo_root)
            for job in jobs:
                _free_container_name(launcher, job, repo_root)
    except (HostError, DockerCallError, ValueError, OSError) as err:
        from astrai.cli_errors import error_line

        _fail_before_launch(error_line(err), sweep_dir, kind="docker error")
    if launcher.job_name is not None:
        from astrai.files import discard_fresh_dir

        discard_fresh_dir(sweep_dir, {SWEEP_FILE})  # its record moved to the named dir

    _note_host_interface_variables(jobs)
    log.info("Launching %d jobs in Docker (%s)", len(jobs), compose_file)
    results = []
    with SignalRelay() as relay:
        for job in jobs:
            HydraConfig.instance().set_config(job.config)
            results.append(_run_job(launcher, job, files_of[job.idx], repo_root, relay))
            configure_log(config.hydra.hydra_logging, config.hydra.verbose)
            if relay.received is not None:
                _stop_sweep(job, results[-1], relay.received)
                break
    return results


def _compose_jobs(
    launcher: LauncherSettings,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    sweep_dir: Path,
) -> list[Job]:
    """Compose and validate every job before starting any container: the first invalid one
    ends the launch (``_fail_before_launch``)."""
    assert launcher.config is not None and launcher.hydra_context is not None
    config = launcher.config
    jobs = []
    for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
        job_config = launcher.hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(job_config):
            job_config.hydra.job.id = idx
            job_config.hydra.job.num = idx
        error = check_job(job_config)
        if error is not None:
            _fail_before_launch(error, sweep_dir)
        infra = OmegaConf.to_container(job_config.infra, resolve=True)
        assert isinstance(infra, dict)
        sweep = job_config.hydra.sweep
        job_dir = Path(str(sweep.dir), str(sweep.subdir)).resolve()
        jobs.append(Job(idx, list(overrides), job_config, infra, job_dir, None))
    return jobs


def _note_host_interface_variables(jobs: list[Job]) -> None:
    """One line when the host sets NCCL variables that name its own network interfaces: they
    are not passed into the bridge-networked container (``HOST_INTERFACE_VARIABLES``)."""
    names = sorted({n for job in jobs for n in unforwarded_host_variables(job.infra, os.environ)})
    if names:
        log.warning(
            "%s from the host not passed into the container: they name the host's network "
            "interfaces, which the container (compose's bridge network) does not have; set "
            "infra.environment.%s to the container's own if needed",
            ", ".join(names),
            names[0],
        )


def _stop_sweep(job: Job, result: JobReturn, received: str) -> None:
    """A SIGTERM or Ctrl-C stops the sweep, not only its running job (as train.py's
    ``stop_sweep_after_a_signal`` does for the basic launcher): that job has checkpointed; exit
    0. A job that failed is left to the sweep to report (exit 2); either way no job starts
    after it."""
    if result.status != JobStatus.COMPLETED:
        return
    log.warning(
        "sweep stopped after job %d (%s); a named sweep (hydra.launcher.job_name) resumes "
        "with the same command",
        job.idx,
        received,
    )
    sys.exit(0)


def _run_job(
    launcher: LauncherSettings,
    job: Job,
    files: list[Path],
    repo_root: Path,
    relay: SignalRelay | None = None,
) -> JobReturn:
    task_config = OmegaConf.masked_copy(job.config, [str(k) for k in job.config if k != "hydra"])
    result = JobReturn(
        overrides=job.overrides,
        cfg=task_config,
        hydra_cfg=job.config,
        working_dir=str(job.job_dir),
        task_name=job.config.hydra.job.name,
    )
    try:
        returncode, tail = _start_job(launcher, job, files, repo_root, relay)
    except OSError as err:  # the run dir or its docker.log cannot be written (disk full, ...)
        return _failed(result, job, f"cannot write {err.filename}: {err.strerror or err}", [])
    summary_path = job.job_dir / SUMMARY_FILE
    if launcher.detach and returncode == 0:
        name = launcher.job_name
        result.status = JobStatus.COMPLETED
        result.return_value = {"container": job.container, "run_dir": str(job.job_dir)}
        log.info(
            "\t#%d : started %s in the background, run dir %s "
            "(make docker-logs NAME=%s, make docker-status, make docker-stop NAME=%s)",
            job.idx,
            job.container,
            job.job_dir,
            name,
            name,
        )
        return result
    if returncode != 0:
        return _failed(result, job, f"exit code {returncode}", tail)
    if not summary_path.is_file():
        return _failed(result, job, f"exit code 0 but no {SUMMARY_FILE} in {job.job_dir}", tail)
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        reason = f"exit code 0 but {summary_path} is unreadable ({' '.join(str(err).split())})"
        return _failed(result, job, reason, tail)
    result.status = JobStatus.COMPLETED
    result.return_value = summary
    log.info("\t#%d : completed, %s", job.idx, summary_path)
    return result


def _failed(result: JobReturn, job: Job, reason: str, tail: list[str]) -> JobReturn:
    """``result`` marked failed with a ``DockerJobError``: the reason (the exit code) and the
    last log lines, which Hydra prints without a traceback when the sweep reads the result."""
    last = "\n".join(f"    {line}" for line in tail) if tail else "    (no output)"
    message = f"astrai: docker job #{job.idx} failed ({reason}); last log lines:\n{last}"
    log.error("\t#%d : FAILED (%s)", job.idx, reason)
    print(message, file=sys.stderr, flush=True)
    result.status = JobStatus.FAILED
    result.return_value = DockerJobError(message)
    return result


def _start_job(
    launcher: LauncherSettings,
    job: Job,
    files: list[Path],
    repo_root: Path,
    relay: SignalRelay | None = None,
) -> tuple[int, list[str]]:
    """Run the job's ``docker compose run``; (exit code, last log lines)."""
    make_dirs(job.job_dir)
    env = job_environment(job.infra, repo_root)
    argv = compose_argv(
        launcher.docker,
        files,
        launcher.service,
        forwarded_names(env, job.infra),
        job.job_dir,
        container_overrides(job.overrides, container_plan(job.infra)),
        user_id=launching_user()[0],
        job_name=launcher.job_name,
        container=job.container,
        detach=launcher.detach,
    )
    if job.container is not None:
        record = {"job_name": launcher.job_name, "container": job.container, "job_num": job.idx}
        record["overrides"] = list(job.overrides)
        (job.job_dir / JOB_FILE).write_text(json.dumps(record, indent=2) + "\n")
    log.info("\t#%d : %s", job.idx, " ".join(filter_overrides(job.overrides)))
    log_file = job.job_dir / JOB_LOG_FILE
    return stream_to_log(argv, env, repo_root, log_file, launcher.tail_lines, relay)
