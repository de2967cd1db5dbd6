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
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

log = logging.getLogger(__name__)

JOB_LOG = "train.log"  # what the command line's job log is called (Hydra: <job name>.log)
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's default


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The config ``astrai-train overrides...`` would run (``conf/`` with ``overrides``),
    checked as the command line checks it.

    Raises:
        ConfigError: an unknown key or option, a wrong type, a value out of range; one line
            naming the key.
    """
    from astrai.config.compose import check_run_config

    if isinstance(overrides, str):  # a lone "a=b" would be iterated character by character
        raise TypeError("overrides is a list of strings: compose(['trainer.total_steps=5'])")
    return check_run_config(list(overrides))


def default_run_dir(now: datetime.datetime | None = None) -> Path:
    """``outputs/<date>/<time>`` under the working directory, as the command line names a run;
    ``-1``, ``-2``... appended while that dir exists, so two calls in one second never resume
    each other's run."""
    now = now or datetime.datetime.now()
    base = Path("outputs") / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S")
    candidate, n = base, 0
    while candidate.exists():
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
        ``RunDirBusy``: another process runs in ``run_dir``.
    """
    from astrai.config.validate import ConfigError, validate_config
    from astrai.files import discard_fresh_dir
    from astrai.run_lock import LOCK_NAME, lock_run_dir, release_run_dir
    from astrai.train import run

    if isinstance(job, DictConfig):
        cfg = job
        validate_config(cfg)  # unknown keys first, as the command line checks them
    else:
        cfg = compose(job)
    if cfg.infra.name in ("docker", "slurm"):
        raise ConfigError(
            f"infra={cfg.infra.name} runs through a Hydra launcher: use the command line "
            "(astrai-train -m hydra/launcher=... ...), docs/docker.md, docs/scaling.md"
        )
    directory = Path(run_dir) if run_dir is not None else default_run_dir()
    lock_run_dir(directory)
    try:
        with _job_log(directory / JOB_LOG):
            try:
                return run(cfg, directory)
            except ConfigError:  # found once the run starts: undo the start
                discard_fresh_dir(directory, {JOB_LOG, LOCK_NAME})
                raise
    finally:
        release_run_dir(directory)


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
