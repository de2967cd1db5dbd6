"""astrai from Python: compose a job's config as ``astrai-train`` would, train it, get its summary.

    import astrai

    cfg = astrai.compose(["train_type=online_ppo", "trainer.total_steps=50"])
    cfg.train_type.optimizer.lr = 3e-4            # a config built in code
    summary = astrai.fit(cfg, run_dir="runs/ppo") # or astrai.fit(["debug=quick"])
    summary["eval/accuracy"], summary["step"]

The function is ``fit``, not ``train``: ``astrai.train`` is the command line's module
(``python -m astrai.train``), and importing it would replace a function of that name on the
package. ``fit`` runs the same trainer as the command line, with the same checks, in the calling
process; it differs where a library call must: errors are exceptions (``ConfigError``,
``CheckpointError``, ``RewardError``, ``RunDirBusy``) instead of an exit status, and the calling
process's signal handlers stay its own outside the training loop (inside it, SIGTERM/SIGINT
checkpoint and stop the run, as on the command line). Hydra's own features (multiruns, launchers,
``${hydra:...}`` interpolations) belong to the command line; a run dir written by ``fit`` has no
``.hydra/`` record, so ``python -m astrai.report`` does not list it (docs/api.md).

``fit`` calls from several threads run one at a time: a run sets process-wide state (torch's
global random streams and thread count, astrai's log handlers, the stop signals), so two runs
side by side in one process would not be reproducible. A second call waits for the first to end;
one into a run dir another call of this process holds or waits for raises ``RunDirBusy`` at
once, as one from another process does. Jobs side by side are processes (the command line's
``-m`` with ``hydra/launcher=joblib``, or ``multiprocessing``).
"""

from __future__ import annotations

import copy
import datetime
import errno
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

log = logging.getLogger(__name__)

JOB_LOG = "train.log"  # what the command line's job log is called (Hydra: <job name>.log)
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's default
JOB_TYPES = (
    "fit takes a list of overrides (astrai.fit(['debug=quick'])) or a DictConfig: one from "
    "astrai.compose, or a plain OmegaConf config (OmegaConf.create(...), OmegaConf.load(...)) "
    "merged onto the defaults"
)

# one fit at a time in this process (module docstring); the run dirs of the calls running or
# waiting (resolved path -> the calling thread's name), so a second call into one is refused
_ONE_RUN = threading.Lock()
_CLAIMS_LOCK = threading.Lock()
_CLAIMED: dict[Path, str] = {}


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The config ``astrai-train overrides...`` would run (``conf/`` with ``overrides``),
    checked as the command line checks it. ``engine.old_logprobs``/``engine.correction`` stay
    as written (``auto``): ``fit`` resolves them for the config it runs, edits in code included.

    Raises:
        ConfigError: an unknown key or option, a wrong type, a value out of range; one line
            naming the key.
    """
    from astrai.config.compose import check_overrides
    from astrai.config.validate import check_config

    if isinstance(overrides, str) or not _strings(overrides):  # "a=b" would be iterated
        raise TypeError("overrides is a list of strings: compose(['trainer.total_steps=5'])")
    cfg = check_overrides(list(overrides))
    check_config(cfg)
    return cfg


def _strings(value: object) -> bool:
    """Whether ``value`` is a list or tuple of strings (a list of overrides)."""
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def default_run_dir(now: datetime.datetime | None = None, taken: Sequence[Path] = ()) -> Path:
    """``outputs/<date>/<time>`` under the working directory, as the command line names a run;
    ``-1``, ``-2``... appended while that dir exists or is in ``taken`` (resolved paths: the
    dirs of ``fit`` calls not started yet), so two calls in one second never resume each
    other's run."""
    now = now or datetime.datetime.now()
    base = Path("outputs") / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S")
    candidate, n = base, 0
    while candidate.exists() or candidate.resolve() in taken:
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def fit(
    job: Sequence[str] | DictConfig = (), run_dir: str | Path | None = None
) -> dict[str, object]:
    """Train one job in this process; returns its summary (what ``summary.json`` holds: the
    final value of every metric, ``step``, ``stopped``, ``wall_time_s``...).

    Args:
        job: overrides (``["train_type=online_ppo", "debug=quick"]``), or a config from
            ``compose`` (edited in code or not); validated either way before anything is
            written.
        run_dir: where the run writes (``metrics.jsonl``, ``tb/``, ``checkpoints/``,
            ``train.log``); a dir holding a checkpoint resumes it (``ckpt.resume=auto``).
            None: a fresh ``outputs/<date>/<time>`` (``default_run_dir``).

    Raises:
        ConfigError: a bad config (nothing is written); ``CheckpointError``: a checkpoint the
        run dir holds cannot be resumed (the dir is left as it was); ``RewardError``,
        ``StaleRolloutError``: the run stopped (the run dir keeps what it did);
        ``RunDirBusy``: another process, or another ``fit`` call of this one, runs in
        ``run_dir``; ``TypeError``: ``job`` or ``run_dir`` is of another type;
        ``NotADirectoryError``: ``run_dir`` is a file.

    Calls from several threads run one after the other (the module's docstring says why).
    """
    from astrai.config.validate import ConfigError
    from astrai.files import discard_fresh_dir
    from astrai.metrics.logger_start import LoggerStartError
    from astrai.run_lock import LOCK_NAME, lock_run_dir, release_run_dir
    from astrai.train import run

    _check_run_dir(run_dir)  # before composing: a misuse is refused at once
    cfg = job_config(job)
    if cfg.infra.name in ("docker", "slurm"):
        raise ConfigError(
            f"infra={cfg.infra.name} runs through a Hydra launcher: use the command line "
            "(astrai-train -m hydra/launcher=... ...), docs/docker.md, docs/scaling.md"
        )
    with _claimed_run_dir(run_dir) as directory, _ONE_RUN:
        lock_run_dir(directory)
        try:
            with _job_log(directory / JOB_LOG):
                try:
                    return run(cfg, directory)
                except (ConfigError, LoggerStartError):  # found once the run starts: undo it
                    discard_fresh_dir(directory, {JOB_LOG, LOCK_NAME})
                    raise
        finally:
            release_run_dir(directory)


def job_config(job: object) -> DictConfig:
    """``fit``'s ``job`` as the validated config it runs: overrides composed (``compose``), a
    config from ``compose`` validated as it is, a plain one (``OmegaConf.create``) merged onto
    the defaults first (``config.plain_config``); ``TypeError`` for anything else. Validation
    records the lag plan in the config it returns (``validate_config``), a copy: the caller's
    config keeps its ``auto`` for the next edit and ``fit``."""
    from astrai.config.plain_config import is_composed, typed_config
    from astrai.config.validate import validate_config

    if isinstance(job, DictConfig):
        cfg = copy.deepcopy(job) if is_composed(job) else typed_config(job)
        validate_config(cfg)  # unknown keys first, as the command line checks them
        return cfg
    if isinstance(job, str) or not _strings(job):
        raise TypeError(f"{JOB_TYPES}; got {_shown_type(job)}")
    return compose(job)  # type: ignore[arg-type]


def _shown_type(value: object) -> str:
    """``int 42``, ``dict {'trainer': {}}``, ``str 'debug=quick'``: the type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


@contextmanager
def _claimed_run_dir(run_dir: object) -> Iterator[Path]:
    """``run_dir`` (None: a fresh ``default_run_dir``) claimed for this call until it returns:
    another ``fit`` call of this process into it, running or waiting, raises ``RunDirBusy``
    (as the lock file tells another process). A file there is ``NotADirectoryError``."""
    from astrai.run_lock import RunDirBusy

    with _CLAIMS_LOCK:
        if run_dir is None:
            directory = default_run_dir(taken=list(_CLAIMED))
        else:
            directory = Path(run_dir)  # type: ignore[arg-type]
        _check_run_dir(directory)  # made a file meanwhile
        key = directory.resolve()
        holder = _CLAIMED.get(key)
        if holder is not None:
            raise RunDirBusy(
                f"run dir {directory} is in use by another astrai.fit call of this process "
                f"(thread {holder}): wait for that run to end, or choose another run_dir"
            )
        _CLAIMED[key] = threading.current_thread().name
    try:
        yield directory
    finally:
        with _CLAIMS_LOCK:
            del _CLAIMED[key]


def _check_run_dir(run_dir: object) -> None:
    """``fit``'s ``run_dir``: None or a path (``TypeError`` otherwise) that is a directory or
    does not exist yet (``NotADirectoryError`` naming the file that is there, or that is part
    of its path)."""
    if run_dir is None:
        return
    if not isinstance(run_dir, str | os.PathLike):
        got = _shown_type(run_dir)
        raise TypeError(f"run_dir is a path (str or pathlib.Path) or None; got {got}")
    directory = Path(run_dir)
    for path in (directory, *directory.parents):
        if path.exists():
            if not path.is_dir():
                what = "run_dir is" if path == directory else f"{path} in run_dir's path is"
                raise NotADirectoryError(
                    errno.ENOTDIR, f"not a directory ({what} a file)", str(path)
                )
            return


@contextmanager
def _job_log(path: Path) -> Iterator[None]:
    """astrai's log records (INFO and up) also go to ``path`` while the run lasts, as the
    command line's job log; the calling process's own logging set-up is left as it is."""
    logger = logging.getLogger("astrai")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.setLevel(logging.INFO)
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:  # e.g. the root's default WARNING
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
