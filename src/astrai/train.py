"""Hydra entry point: compose the config, validate it, hand it to the trainer. No logic here."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from astrai.checkpoints.layout import CheckpointError
from astrai.cli_errors import error_line, print_page
from astrai.config.command_line import (
    explicit_run_dir,
    node_rank,
    single_run_overrides,
    torchrun_arguments,
)
from astrai.config.compose import check_overrides, check_preset_syntax, check_sweep_overrides
from astrai.config.help import help_text
from astrai.config.store import register_configs
from astrai.config.threads import available_cores, launcher_parallel_jobs
from astrai.config.validate import ConfigError, validate_config
from astrai.distributed import apply_slurm_environment
from astrai.files import discard_fresh_dir, write_file_atomic
from astrai.metrics.logger_start import LoggerStartError
from astrai.paths import CONFIG_DIR
from astrai.rewards.base import RewardError
from astrai.rollout.episodes.calls import EnvironmentFailing
from astrai.rollout.staleness import StaleRolloutError
from astrai.run_lock import LOCK_NAME, RunDirBusy, lock_run_dir
from astrai.training.nonfinite import NonFiniteUpdate
from astrai.training.stopping import (
    SIGNALS,
    StopInterrupt,
    begin_start_up,
    catch_stop_signals,
    end_start_up,
    job_budget,
)

log = logging.getLogger(__name__)


def run(cfg: DictConfig, run_dir: str | Path, parallel_jobs: int = 1) -> dict[str, object]:
    """Train with a composed, validated config; return the run summary. ``parallel_jobs``: the
    jobs of the multirun running side by side with this one (``infra.num_threads=auto``)."""
    from astrai.training.launch import (  # heavy imports after validation
        launch_workers,
        needs_launch,
    )
    from astrai.training.run import fit
    from astrai.training.setup import apply_num_threads

    if SIGNALS.received is not None:  # while the job was being composed: build nothing
        log.warning(
            "stopped (%s) during start-up: no step taken, nothing to save", SIGNALS.received
        )
        return {"step": None, "stopped": SIGNALS.received}
    threads = apply_num_threads(cfg.infra.num_threads, parallel_jobs)  # before any model
    if cfg.infra.num_threads != "auto" or parallel_jobs > 1:  # the default run says nothing
        log.info(
            "torch intra-op threads: %d (infra.num_threads=%s; jobs side by side: %d)",
            threads,
            cfg.infra.num_threads,
            parallel_jobs,
        )
    if needs_launch(cfg.infra):
        end_start_up()  # the launcher's stop is its workers' (``StopForwarder``)
        summary = launch_workers(cfg, Path(run_dir))
    else:
        summary = fit(cfg, run_dir)
    if summary.get("step") is None:  # a worker node without global rank 0, or stopped above
        return summary
    log.info(
        "%s: %d steps in %.1fs, eval/accuracy %s (step 0: %s), run dir %s",
        "done" if summary["stopped"] is None else f"stopped ({summary['stopped']})",
        summary["step"],
        summary["wall_time_s"],
        _accuracy(summary.get("eval/accuracy")),
        _accuracy(summary.get("initial/eval/accuracy")),
        run_dir,
    )
    return summary


def _accuracy(value: object) -> str:
    """An accuracy for the last log line; ``-`` for none (a run stopped before evaluating)."""
    return f"{value:.3f}" if isinstance(value, int | float) else "-"


@dataclass(frozen=True)
class StartUp:
    """What ``main`` learned before Hydra starts the job, handed to the job explicitly (no module
    state, so ``main`` can run again in the same interpreter, as the in-process CLI tests do).

    Args:
        earlier_record: the Hydra record (``.hydra/`` files) an explicit run dir held before
            this start, which Hydra rewrites before the job runs: put back if the start is
            refused. None: the dir had none, or no explicit run dir was given.
        earlier_dir: that run dir, resolved.
    """

    earlier_record: dict[str, bytes] | None = None
    earlier_dir: Path | None = None


def read_hydra_record(run_dir: Path) -> dict[str, bytes] | None:
    """The files of ``run_dir/.hydra`` (name -> bytes), None when there is none."""
    record = run_dir / ".hydra"
    if not record.is_dir():
        return None
    return {path.name: path.read_bytes() for path in record.iterdir() if path.is_file()}


def restore_hydra_record(run_dir: Path, files: dict[str, bytes]) -> None:
    """Make ``run_dir/.hydra`` hold exactly ``files`` again (each written atomically)."""
    record = run_dir / ".hydra"
    record.mkdir(exist_ok=True)
    for path in record.iterdir():
        if path.is_file() and path.name not in files:
            path.unlink()
    for name, data in files.items():
        write_file_atomic(record / name, functools.partial(_write_bytes, data=data))


def _write_bytes(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _discard_run_dir(run_dir: Path, start: StartUp) -> None:
    """Undo the start of a run that failed validation or was refused its checkpoint: a fresh run
    dir (``.hydra/``, the job log, its lock file) is removed; an existing one gets back the
    Hydra record it had (a refused resume leaves the run it belongs to as it was)."""
    if start.earlier_record is not None and run_dir.resolve() == start.earlier_dir:
        restore_hydra_record(run_dir, start.earlier_record)
        return
    discard_fresh_dir(run_dir, {".hydra", f"{HydraConfig.get().job.name}.log", LOCK_NAME})


IN_CONTAINER_VARIABLE = "ASTRAI_IN_CONTAINER"  # set by docker/Dockerfile


def check_where_it_runs(cfg: DictConfig) -> None:
    """Refuse a job that would silently run on the host although Docker was asked for: Hydra
    ignores ``hydra/launcher`` outside a multirun, and ``infra=docker`` means "in the
    container"."""
    hydra_cfg = HydraConfig.get()
    launcher = str(hydra_cfg.launcher.get("_target_", ""))
    if launcher.endswith(".DockerLauncher") and hydra_cfg.mode == RunMode.RUN:
        raise ConfigError(
            "hydra/launcher=docker only launches multiruns: add -m "
            "(python train.py -m hydra/launcher=docker infra=docker ...)"
        )
    if cfg.infra.name == "docker" and not os.environ.get(IN_CONTAINER_VARIABLE):
        raise ConfigError(
            "infra=docker runs in the container through the Docker launcher: "
            "python train.py -m hydra/launcher=docker infra=docker ... (or make docker-train)"
        )


def parallel_jobs() -> int:
    """The jobs the current Hydra job's launcher runs side by side (the joblib launcher's
    ``n_jobs``; 1 for the basic launcher and outside a multirun)."""
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    return launcher_parallel_jobs(hydra_cfg.launcher, multirun, available_cores())


def hydra_task(start: StartUp) -> Callable[[], Any]:
    """The Hydra entry of one ``main`` call: composes the job (or each job of a multirun) and
    runs ``run_job`` on it with ``start``. A closure rather than a module-level function so the
    start-up state reaches the job as an argument; its module, ``astrai.train``, names the job
    (``train.log``) as before."""

    @hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
    def task(cfg: DictConfig) -> float | None:
        return run_job(cfg, start)

    return task


def run_job(cfg: DictConfig, start: StartUp) -> float | None:
    """One composed job: validate, lock the run dir, train; every known failure is one line on
    stderr and exit 2; a stop signal or ``trainer.max_duration`` during its start-up ends it at
    once, exit 0 (``stopped_during_start_up``). Returns the job's ``optimized_metric`` (what a
    sweeper optimises)."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if str(HydraConfig.get().launcher.get("_target_", "")).startswith(SUBMITIT_LAUNCHERS):
        # a submitit job never ran main(), and submitit's SIGTERM handler only logs the signal:
        # a scancel or requeue during start-up was lost, and Slurm's SIGKILL came mid-run
        catch_stop_signals()
    begin_start_up()  # a sequential sweep's later job: interruptible as the first one
    try:
        with job_budget(_budget_seconds(cfg)):  # trainer.max_duration counts from start-up
            return _run_job(cfg, start, run_dir)
    except StopInterrupt as stop:
        stopped_during_start_up(stop.signal_name, run_dir, start)
        stop_sweep_after_a_signal(stop.signal_name)
        return None


def _budget_seconds(cfg: DictConfig) -> float | None:
    """``trainer.max_duration`` in seconds (None: none, or a value validation will refuse)."""
    from astrai.config.duration import parse_duration

    budget = cfg.trainer.get("max_duration")
    try:
        return parse_duration(budget) if budget is not None else None
    except (TypeError, ValueError):
        return None


def stopped_during_start_up(reason: str, run_dir: Path | None, start: StartUp) -> None:
    """A stop (``reason``: a signal, or ``max_duration``) ended the start-up: no step was taken
    and nothing is saved. The run dir keeps ``.hydra/`` and the job log, whose last line says
    so (what a user opening it looks for); an explicit run dir that held an earlier run's Hydra
    record gets that record back, as a refused start leaves it. Later signals are ignored."""
    end_start_up()
    SIGNALS.completed = True  # the stop is done: a second signal changes nothing now
    if run_dir is not None and start.earlier_record is not None:
        if run_dir.resolve() == start.earlier_dir:
            restore_hydra_record(run_dir, start.earlier_record)
    where = f" (run dir {run_dir})" if run_dir is not None else ""
    log.warning("stopped (%s) during start-up: no step taken, nothing to save%s", reason, where)


def _run_job(cfg: DictConfig, start: StartUp, run_dir: Path) -> float | None:
    try:
        check_where_it_runs(cfg)
        validate_config(cfg)
    except ConfigError as err:
        _discard_run_dir(run_dir, start)
        print(f"astrai: config error: {err}", file=sys.stderr)
        sys.exit(2)
    apply_slurm_environment(cfg.infra.name)  # a Slurm task's rank, before asking for it
    # the launcher of a node other than node 0 (infra.node_rank) is no rank: node 0 owns the dir
    main_rank = int(os.environ.get("RANK", "0")) == 0 and int(cfg.infra.node_rank) == 0
    if not main_rank:  # torchrun's other ranks log to stdout; a Slurm task's, to its own file
        _leave_job_log_to_rank_0()
    try:
        if main_rank:  # rank 0 owns the dir
            lock_run_dir(run_dir)
    except RunDirBusy as err:  # another run's dir: leave everything in it as it is
        print(f"astrai: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:  # a full disk: undo the start as for a config error
        _discard_run_dir(run_dir, start)
        print(f"astrai: I/O error: {error_line(err)}", file=sys.stderr)
        sys.exit(2)
    try:
        summary = run(cfg, run_dir, parallel_jobs())
    except ConfigError as err:  # found once the run starts (e.g. the launch's grace period)
        _discard_run_dir(run_dir, start)
        print(f"astrai: config error: {err}", file=sys.stderr)
        sys.exit(2)
    except CheckpointError as err:
        # raised while restoring, before the run writes anything
        _discard_run_dir(run_dir, start)
        print(f"astrai: checkpoint error: {err}", file=sys.stderr)
        sys.exit(2)
    except LoggerStartError as err:  # W&B or MLflow could not start: before any write
        _discard_run_dir(run_dir, start)
        print(f"astrai: logger error: {err}", file=sys.stderr)
        sys.exit(2)
    except RewardError as err:  # mid-run: the run dir keeps what the run did so far
        log.error("stopped: %s", err)
        print(f"astrai: reward error: {err}", file=sys.stderr)
        sys.exit(2)
    except StaleRolloutError as err:  # the policy-lag guard (a resume's is checked at start)
        log.error("stopped: %s", err)
        print(f"astrai: stale rollout: {err}", file=sys.stderr)
        sys.exit(2)
    except NonFiniteUpdate as err:  # NaN/inf steps in a row, or a checkpoint of such weights
        log.error("stopped: %s", err)
        print(f"astrai: non-finite update: {err}", file=sys.stderr)
        sys.exit(2)
    except EnvironmentFailing as err:  # every episode failed, steps in a row (reward_signal)
        log.error("stopped: %s", err)
        print(f"astrai: environment error: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:  # the machine said no: a full disk, a path that cannot be written
        line = error_line(err)
        log.error("stopped: %s", line)
        print(f"astrai: I/O error: {line}", file=sys.stderr)
        sys.exit(2)
    stop_sweep_after_a_signal(summary.get("stopped"))
    value = summary.get(cfg.optimized_metric)
    return float(value) if isinstance(value, int | float) else None


def _leave_job_log_to_rank_0() -> None:
    """Drop the job log file (``<job name>.log``) Hydra opened for this process: every task of
    a Slurm job runs Hydra's job set-up in the one run dir, and only rank 0 writes its log."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()


BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
SUBMITIT_LAUNCHERS = "hydra_plugins.hydra_submitit_launcher."  # its Slurm and local launchers
STOP_SIGNALS = ("SIGTERM", "SIGINT")


def stop_sweep_after_a_signal(stopped: object) -> None:
    """A SIGTERM or Ctrl-C stops a sequential sweep, not only its running job: that job has
    checkpointed, and without this the basic launcher would start the next one. Exit 0; the
    same command resumes the stopped job and runs the rest. (Other launchers run each job in
    its own process and signal them there.)"""
    hydra_cfg = HydraConfig.get()
    if stopped not in STOP_SIGNALS or hydra_cfg.mode != RunMode.MULTIRUN:
        return
    if hydra_cfg.launcher.get("_target_") != BASIC_LAUNCHER:
        return
    log.warning(
        "sweep stopped (%s) at job %s; the same command resumes it", stopped, hydra_cfg.job.num
    )
    sys.exit(0)


def _config_error(message: str) -> NoReturn:
    print(f"astrai: config error: {message}", file=sys.stderr)
    sys.exit(2)


def _main() -> None:
    argv = torchrun_arguments(sys.argv, dict(os.environ))
    if argv is None:
        _config_error(
            "under torchrun pass one hydra.run.dir=<dir> to every rank "
            "(each rank would otherwise pick its own timestamped run dir)"
        )
    if any(arg in ("--help", "-h") for arg in argv[1:]):
        sys.exit(print_page(help_text()))  # quiet under `| head`
    sys.argv = argv
    register_configs()
    try:
        check_preset_syntax(argv[1:])  # in every mode: -m experiment=ppo_sweep is the common one
        overrides = single_run_overrides(argv)
        if overrides is not None:  # Hydra's own compose errors span lines and exit 1
            check_overrides(overrides)
        sweep = single_run_overrides(argv, multirun=True)
        if sweep is not None:  # every swept value, before the first job starts
            check_sweep_overrides(sweep)
    except ConfigError as err:
        _config_error(str(err))
    explicit_dir = explicit_run_dir(overrides or [])
    start = StartUp()
    # the config is not composed yet: a Slurm task's rank is its SLURM_PROCID (``infra=slurm``
    # turns it into RANK; without it every task is a run of its own, and the lock says so)
    launch_rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))
    if explicit_dir is not None and launch_rank == "0" and node_rank(argv[1:]) == 0:
        try:  # before Hydra writes .hydra/ into a dir another run owns
            lock_run_dir(explicit_dir)
        except RunDirBusy as err:
            print(f"astrai: {err}", file=sys.stderr)
            sys.exit(2)
        except OSError as err:  # a full disk: lock_run_dir removed what it had created
            print(f"astrai: I/O error: {error_line(err)}", file=sys.stderr)
            sys.exit(2)
        start = StartUp(read_hydra_record(explicit_dir), explicit_dir.resolve())
    if any(arg in ("-m", "--multirun") for arg in argv[1:]):
        # this process runs the sweep's launcher: a stop is the launcher's to pass on (the
        # Docker launcher's containers, joblib's workers); each job the basic launcher runs
        # here is interruptible in its own start-up again (``hydra_task``)
        end_start_up()
    hydra_task(start)()


def main() -> None:
    """Console entry (``astrai-train``, ``python train.py`` and ``python -m astrai.train``).
    From its first line a stop signal ends the start-up at once, exit 0 (``stopping``)."""
    catch_stop_signals()  # from the first line: a stop during start-up exits 0 too
    try:
        _main()
    except StopInterrupt as stop:  # before the job (or inside Hydra, around it)
        stopped_during_start_up(stop.signal_name, None, StartUp())
        sys.exit(0)
    finally:
        end_start_up()  # (in-process callers: the next main starts its own)


if __name__ == "__main__":  # python -m astrai.train: run the importable module's main, so
    # the job's loggers and Hydra's task function are astrai.train's, not __main__'s
    from astrai.train import main as module_main

    module_main()
