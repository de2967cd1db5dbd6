"""Read a sweep dir: its jobs, their overrides, metrics history, summary and status.

A job is a folder with ``.hydra/overrides.yaml`` (Hydra writes it when the job starts). Works on
a sweep that is still running: ``metrics.jsonl`` may end in a torn line and ``summary.json`` only
exists once a job has ended. Jobs that the sweep defines but that have no folder (not started
yet, or failed before writing anything: a config or checkpoint error removes the job's folder)
are listed as ``missing`` when the sweep's ``multirun.yaml`` can be expanded the way Hydra's
basic sweeper expands it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from astrai.cli_errors import error_line
from astrai.metrics.writers import METRICS_FILE, SUMMARY_FILE, read_metrics

MULTIRUN_FILE = "multirun.yaml"
LOG_TAIL_BYTES = 64 * 1024
STALE_AFTER_S = 30 * 60.0  # a job without a summary and no write for this long: "stale"


class JobFileError(ValueError):
    """A job file that cannot be read: the message names the file (one line)."""

    def __init__(self, path: Path, reason: BaseException | str) -> None:
        if isinstance(reason, OSError) and reason.strerror:
            why = reason.strerror  # the path is already named
        else:
            why = reason if isinstance(reason, str) else error_line(reason)
        super().__init__(f"{path}: {why}")


@dataclass
class Job:
    """One job of a sweep, as found on disk.

    ``status``: ``done`` (summary written, run complete: every step, or its metrics reached
    ``trainer.stop_at``), ``stopped (<why>)`` (summary of a run that was stopped: SIGTERM,
    SIGINT, max_duration), ``running`` (no summary yet, files recently
    written), ``failed`` (no summary and the job's log records an error), ``stale`` (no summary and
    no write for ``stale_after`` seconds: killed or crashed without a log record), ``missing``
    (defined by the sweep, no folder).
    """

    name: str
    num: int | None
    path: Path | None
    overrides: dict[str, str]
    status: str
    history: list[dict[str, float]] = field(default_factory=list)
    summary: dict[str, object] = field(default_factory=dict)
    total_steps: int | None = None
    optimized_metric: str | None = None

    def final(self, metric: str) -> float | None:
        """The summary's value, or (running jobs) the latest logged value."""
        value = self.summary.get(metric)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        for row in reversed(self.history):
            if metric in row:
                return row[metric]
        return None

    def curve(self, metric: str) -> tuple[list[int], list[float]]:
        """(steps, values) of ``metric`` over the logged history (non-finite values dropped)."""
        points = [
            (int(row["step"]), row[metric])
            for row in self.history
            if metric in row and math.isfinite(row[metric])
        ]
        return [s for s, _ in points], [v for _, v in points]

    def best(self, metric: str) -> tuple[float | None, int | None]:
        """Highest logged value of ``metric`` and the step where it was first reached."""
        steps, values = self.curve(metric)
        if not values:
            return None, None
        best = max(values)
        return best, steps[values.index(best)]

    @property
    def node(self) -> str | None:
        """Where the run ran, as its summary says (``training.node``); None without one."""
        node = self.summary.get("node")
        return node if isinstance(node, str) else None

    @property
    def step(self) -> int | None:
        """Steps done: the summary's, or the last logged step when that is later (a running
        job, also one resumed after a stop)."""
        steps = [int(self.history[-1]["step"])] if self.history else []
        if isinstance(self.summary.get("step"), int):
            steps.append(int(self.summary["step"]))  # type: ignore[call-overload]
        return max(steps) if steps else None


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    """``["a.b=1", "+c=x", "~d"]`` -> ``{"a.b": "1", "c": "x", "~d": ""}`` (order kept)."""
    parsed: dict[str, str] = {}
    for override in overrides:
        key, _, value = str(override).partition("=")
        parsed[key.lstrip("+")] = value
    return parsed


def _log_has_error(job_dir: Path) -> bool:
    """Whether the job's Hydra log (``<job name>.log``) records an error or a traceback."""
    for log in job_dir.glob("*.log"):
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - LOG_TAIL_BYTES))
            tail = handle.read().decode("utf-8", errors="replace")
        if "][ERROR] - " in tail or "][CRITICAL] - " in tail or "Traceback (most recent" in tail:
            return True
    return False


def _last_write(job_dir: Path) -> float:
    files = [job_dir / METRICS_FILE, *job_dir.glob("*.log"), *job_dir.glob("tb/*")]
    return max((p.stat().st_mtime for p in files if p.is_file()), default=0.0)


def job_status(job: Job, stale_after: float, now: float) -> str:
    """See ``Job``. A stopped run that was resumed and logs past its summary is ``running``."""
    assert job.path is not None
    summary_step = job.summary.get("step")
    resumed = bool(job.history) and isinstance(summary_step, int)
    if job.summary and not (resumed and job.history[-1]["step"] > summary_step):
        stopped = job.summary.get("stopped")
        # a run that reached its targets ended as configured: it counts as a done job
        return "done" if stopped in (None, "stop_at") else f"stopped ({stopped})"
    if _log_has_error(job.path):
        return "failed"
    return "running" if now - _last_write(job.path) <= stale_after else "stale"


def read_yaml(path: Path, kind: type[DictConfig | ListConfig] = DictConfig) -> Any:
    """``path`` loaded with OmegaConf; a ``JobFileError`` naming the file when it is unreadable,
    not UTF-8, not YAML or not a ``kind`` (a mapping, or a list)."""
    try:
        loaded = OmegaConf.load(path)
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise JobFileError(path, err) from err
    if not isinstance(loaded, kind):
        raise JobFileError(path, "not a YAML " + ("list" if kind is ListConfig else "mapping"))
    return loaded


def read_summary(path: Path) -> dict[str, object]:
    """``summary.json`` (empty when there is none yet, or a torn one of a running job); a
    ``JobFileError`` for one that is not a JSON object or not UTF-8."""
    if not path.is_file():
        return {}
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise JobFileError(path, err) from err
    except ValueError:
        return {}
    except OSError as err:
        raise JobFileError(path, err) from err
    if not isinstance(summary, dict):
        raise JobFileError(path, f"not a JSON object (got {type(summary).__name__})")
    return summary


def read_history(path: Path) -> list[dict[str, float]]:
    """The rows of ``metrics.jsonl``; a ``JobFileError`` for a non-numeric value or bytes that
    are not UTF-8."""
    try:
        return read_metrics(path)
    except (OSError, ValueError, TypeError) as err:
        reason = error_line(err)
        if isinstance(err, ValueError | TypeError) and not isinstance(err, UnicodeDecodeError):
            reason = f"a metric value that is not a number ({reason})"
        raise JobFileError(path, reason) from err


def _job_number(job_dir: Path) -> int | None:
    if job_dir.name.isdigit():
        return int(job_dir.name)
    hydra_yaml = job_dir / ".hydra" / "hydra.yaml"
    if hydra_yaml.is_file():
        num = OmegaConf.select(read_yaml(hydra_yaml), "hydra.job.num", default=None)
        return num if isinstance(num, int) else None
    return None


def load_job(job_dir: Path, stale_after: float = STALE_AFTER_S, now: float | None = None) -> Job:
    """Read one job folder (``.hydra/``, ``metrics.jsonl``, ``summary.json``); a
    ``JobFileError`` naming the first file that cannot be read."""
    overrides = read_yaml(job_dir / ".hydra" / "overrides.yaml", ListConfig)
    config_path = job_dir / ".hydra" / "config.yaml"
    config = read_yaml(config_path) if config_path.is_file() else OmegaConf.create()
    summary = read_summary(job_dir / SUMMARY_FILE)
    total = OmegaConf.select(config, "trainer.total_steps", default=None)
    job = Job(
        name=job_dir.name,
        num=_job_number(job_dir),
        path=job_dir,
        overrides=parse_overrides(list(overrides)),
        status="",
        history=read_history(job_dir / METRICS_FILE),
        summary=summary,
        total_steps=total if isinstance(total, int) else None,
        optimized_metric=OmegaConf.select(config, "optimized_metric", default=None),
    )
    job.status = job_status(job, stale_after, time.time() if now is None else now)
    return job


def expected_jobs(sweep_dir: Path) -> list[list[str]] | None:
    """The job override lists the basic sweeper makes of ``multirun.yaml`` (job number = list
    index); None when there is no such file or another sweeper ran the sweep."""
    path = sweep_dir / MULTIRUN_FILE
    if not path.is_file():
        return None
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        hydra_cfg = OmegaConf.load(path).hydra
        if not str(hydra_cfg.sweeper.get("_target_", "")).endswith(".BasicSweeper"):
            return None
        params = hydra_cfg.sweeper.get("params") or {}
        arguments = [f"{k}={v}" for k, v in params.items()]
        arguments += [str(o) for o in hydra_cfg.overrides.task]
        overrides = OverridesParser.create().parse_overrides(arguments)
        batches = BasicSweeper.split_arguments(overrides, None)
    except Exception:  # an unreadable or foreign multirun.yaml: report only what exists
        return None
    return [job for batch in batches for job in batch]


def _job_dirs(sweep_dir: Path) -> list[Path]:
    if (sweep_dir / ".hydra" / "overrides.yaml").is_file():
        return [sweep_dir]  # a single run dir
    found = {p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")}
    return sorted(found - {sweep_dir})


def load_sweep(sweep_dir: Path, stale_after: float = STALE_AFTER_S) -> list[Job]:
    """Every job of the sweep (found or missing), ordered by job number, then by name."""
    now = time.time()
    jobs = [load_job(path, stale_after, now) for path in _job_dirs(sweep_dir)]
    present = {job.num for job in jobs}
    for num, overrides in enumerate(expected_jobs(sweep_dir) or []):
        if num not in present:
            jobs.append(Job(str(num), num, None, parse_overrides(overrides), "missing"))
    return sorted(jobs, key=lambda j: (j.num is None, j.num if j.num is not None else 0, j.name))
