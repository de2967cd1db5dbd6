"""Where metrics go: TensorBoard event files, ``metrics.jsonl`` and ``summary.json``."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

from tensorboard.compat.proto.summary_pb2 import Summary
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.writer import FileWriter

from astrai.files import write_file_atomic
from astrai.metrics.dashboards import tensorboard_run_name
from astrai.metrics.run_ids import TrackedStep, read_tracked_step, write_tracked_step

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
TENSORBOARD_DIR = "tb"


def _json_number(value: float) -> float | None:
    """JSON has no NaN/inf: write them as null."""
    return value if math.isfinite(value) else None


def _json_record(values: dict[str, float]) -> dict[str, float | None]:
    return {name: _json_number(value) for name, value in values.items()}


def read_metrics(path: Path) -> list[dict[str, float]]:
    """Rows of ``metrics.jsonl``; torn or foreign lines skipped, null read as NaN."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # e.g. a torn last line from a killed run
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            rows.append({k: float("nan") if v is None else float(v) for k, v in record.items()})
    return rows


class MetricsFileError(ValueError):
    """A ``metrics.jsonl`` a resume cannot keep rows of; the message names the file and line."""


def _row_for_resume(line: bytes) -> dict[str, float]:
    record = json.loads(line.decode("utf-8"))
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(f"'step' is {step!r}, not an integer")
    row = {}
    for name, value in record.items():
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise ValueError(f"{name!r} is {value!r}, not a number")
        row[name] = float("nan") if value is None else float(value)
    return row


def read_metrics_for_resume(path: Path) -> list[dict[str, float]]:
    """Rows of ``metrics.jsonl`` that a resume keeps, strictly: only a torn last line (a run
    killed mid-write) is dropped; any other line that is not a JSON object of numbers with an
    integer ``step`` raises ``MetricsFileError`` naming the file and line."""
    lines = path.read_bytes().split(b"\n")
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(_row_for_resume(line))
        except (ValueError, UnicodeDecodeError, OverflowError) as err:
            if number == len(lines):  # no newline after it: torn by a kill, dropped
                continue
            problem = "not UTF-8" if isinstance(err, UnicodeDecodeError) else err
            raise MetricsFileError(
                f"{path} line {number}: malformed row ({problem}); fix or delete that line "
                f"(rows after the checkpoint's step are dropped on resume anyway)"
            ) from err
    return rows


def tensorboard_dir(run_dir: Path, tb_run: str | None = None, resuming: bool = False) -> Path:
    """The folder of a run's event files: ``tb/`` or ``tb/<run name>/`` (see ``RunLogger``).

    A resumed run keeps writing where its events are, so its record stays one run (and the
    purge on resume applies to it) even if its name would now differ: an existing ``tb/`` with
    event files, or its only sub-folder.
    """
    root = run_dir / TENSORBOARD_DIR
    name = tensorboard_run_name() if tb_run is None else tb_run
    wanted = root / name if name else root
    if resuming and root.is_dir() and not wanted.is_dir():
        if any(p.is_file() for p in root.iterdir()):
            return root
        subdirs = [p for p in root.iterdir() if p.is_dir()]
        if len(subdirs) == 1:
            return subdirs[0]
    return wanted


def _text_writer(text: str) -> Callable[[Path], None]:
    """A ``write_file_atomic`` writer of ``text`` (UTF-8) into the file it is given."""

    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    return write


def _rewrite_rows(path: Path, rows: list[dict[str, float]]) -> None:
    """Replace ``path`` (``metrics.jsonl``) by ``rows``, atomically."""
    lines = []
    for row in rows:
        values = {name: value for name, value in row.items() if name != "step"}
        lines.append(json.dumps({"step": int(row["step"]), **_json_record(values)}))
    text = "".join(line + "\n" for line in lines)
    write_file_atomic(path, _text_writer(text))


@dataclass(frozen=True)
class ResumePoint:
    """Where a (re)started run's records pick up, read before anything is written.

    Args:
        step: the checkpoint's step: rows logged after it are dropped (-1: every row, a
            restart of a run that crashed before its first checkpoint).
        rows: the rows of ``metrics.jsonl`` kept (``step <= step``), in order, NaN for null.
        tracked: the last step an earlier start handed to the trackers (W&B, MLflow) and
            whether it closed them after it (``run_ids.read_tracked_step``); None: unknown.
    """

    step: int
    rows: list[dict[str, float]] = field(default_factory=list)
    tracked: TrackedStep | None = None

    @property
    def trackers_hold_exactly_the_rows(self) -> bool:
        """Whether the trackers' runs hold every kept row and nothing after the checkpoint, so
        they can go on where they are: the earlier start handed them nothing after it and
        closed them (a stop, whose checkpoint is at its last step). A crash after the
        checkpoint leaves them steps that W&B cannot rewind and MLflow would hold twice; one
        right at it may leave W&B without rows still in its buffers."""
        return self.step >= 0 and self.tracked == TrackedStep(self.step, closed=True)


def read_resume_point(run_dir: Path, step: int) -> ResumePoint:
    """The ``ResumePoint`` of ``run_dir`` resumed at ``step`` (-1: none kept); a malformed row
    before the last is a ``MetricsFileError`` (see ``read_metrics_for_resume``)."""
    path = run_dir / METRICS_FILE
    rows = read_metrics_for_resume(path) if path.is_file() and step >= 0 else []
    kept = [row for row in rows if row["step"] <= step]
    return ResumePoint(step, kept, read_tracked_step(run_dir))


class MetricSink(Protocol):
    """A tracker beside TensorBoard (``metrics.wandb_sink``, ``metrics.mlflow_sink``)."""

    def log(self, step: int, values: dict[str, float]) -> None:
        """Scalars at ``step``, a step after the last one logged (or the same step again)."""

    def amend(self, step: int, values: dict[str, float], rows: list[dict[str, float]]) -> None:
        """Add ``values`` to ``step``'s row, one an earlier start may have logged (a resumed
        run's evaluation of the step its stop left unevaluated); ``rows``: every row of the
        run so far, the amended one included (``metrics.jsonl``'s)."""

    def log_samples(self, step: int, tag: str, rows: list[tuple[str, str, float]]) -> None:
        """(prompt, response, reward) rows at ``step``."""

    def close(self) -> None:
        """The run is over (or stopped, to be resumed)."""


class RunLogger:
    """Writes one JSON object per logged step and the same scalars to TensorBoard.

    Keeps the latest value of every metric so ``summary()`` holds the final metrics.

    Args:
        resume_step: when resuming from a checkpoint at this step, rows logged after it (by a
            run that went on past its last checkpoint) are dropped from ``metrics.jsonl`` and
            purged from TensorBoard, so the resumed run's records read as one uninterrupted run;
            -1 drops them all (a restart of a run that crashed before its first checkpoint).
        enabled: False on every rank but 0 of a distributed run: nothing is written, only
            ``latest`` is kept.
        tb_run: the TensorBoard run: events go to ``tb/<tb_run>/`` (``""``: ``tb/`` itself).
            None: the Hydra job's ``tensorboard_run_name`` — a sweep job's swept overrides
            (``ppo_gamma=0.95,ppo_gae_lambda=0.9``), so ``tensorboard --logdir <sweep dir>``
            names its runs by them; ``tb/`` for a single run.
        sinks: further trackers (W&B, MLflow: ``metrics.loggers``) that get every scalar and
            sample panel; closed with this logger. Before a step first reaches them, the step
            is kept in the run dir (``run_ids.write_tracked_step``): a resume then knows
            whether their runs hold steps after its checkpoint.
        resume: the ``ResumePoint`` already read (``metrics.loggers`` reads it before opening
            the sinks); None: read here from ``resume_step``.
    """

    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        flush_secs: int = 10,
        resume_step: int | None = None,
        enabled: bool = True,
        tb_run: str | None = None,
        sinks: Sequence[MetricSink] = (),
        resume: ResumePoint | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.sinks = list(sinks)
        self.latest: dict[str, float] = {}
        self.tb_dir: Path | None = None  # where the event files go
        self._jsonl = None
        self._tb = None
        self._tracked_step: int | None = None  # the last step handed to the sinks
        if not enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume is None and resume_step is not None:
            resume = read_resume_point(self.run_dir, resume_step)
        if resume is not None:
            self._truncate_after(resume)
        self._jsonl = open(self.run_dir / METRICS_FILE, "a", encoding="utf-8")  # noqa: SIM115
        if tensorboard:
            self.tb_dir = tensorboard_dir(self.run_dir, tb_run, resume is not None)
            self._tb = SummaryWriter(
                str(self.tb_dir),
                flush_secs=flush_secs,
                purge_step=resume.step + 1 if resume is not None else None,
            )

    def _truncate_after(self, resume: ResumePoint) -> None:
        """Keep the rows up to the checkpoint (rewritten atomically), replay them into
        ``latest``; the sinks, opened on ``resume``, hold exactly those rows now."""
        for row in resume.rows:
            self.latest.update({k: v for k, v in row.items() if k != "step"})
        path = self.run_dir / METRICS_FILE
        if path.is_file():
            _rewrite_rows(path, resume.rows)
        if self.sinks:
            self._tracked_step = resume.step
            write_tracked_step(self.run_dir, resume.step)

    def _track(self, step: int) -> None:
        """Keep ``step`` as the last one handed to the sinks, before they get it."""
        if self.sinks and (self._tracked_step is None or step > self._tracked_step):
            write_tracked_step(self.run_dir, step)
            self._tracked_step = step

    def _values(self, metrics: dict[str, float]) -> dict[str, float]:
        """``metrics`` as sorted floats, kept in ``latest`` and written to TensorBoard at the
        step ``_record`` passes on."""
        values = {name: float(value) for name, value in sorted(metrics.items())}
        self.latest.update(values)
        return values

    def _record(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        """``metrics`` as sorted floats, kept in ``latest``, written to TensorBoard and handed
        to the sinks."""
        values = self._values(metrics)
        self._write_scalars(step, values)
        self._track(step)
        for sink in self.sinks:
            sink.log(step, values)
        return values

    def _write_scalars(self, step: int, values: dict[str, float]) -> None:
        if self._tb is not None:
            for name, value in values.items():
                self._tb.add_scalar(name, value, step)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` (name -> float) at ``step``."""
        values = self._record(step, metrics)
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, **_json_record(values)}) + "\n")
            self._jsonl.flush()

    def amend(self, step: int, metrics: dict[str, float]) -> None:
        """Add ``metrics`` to ``step``'s row, the last one logged: a resumed run's evaluation
        of the step its stop left unevaluated. ``metrics.jsonl`` is rewritten atomically, so
        the row reads as if the evaluation had run then; without that row (a file deleted by
        hand) they are logged as a row of their own."""
        path = self.run_dir / METRICS_FILE
        rows = read_metrics(path) if self._jsonl is not None else []
        if not rows or rows[-1]["step"] != step:
            self.log(step, metrics)
            return
        values = self._values(metrics)
        self._write_scalars(step, values)
        amended = [*rows[:-1], {**rows[-1], **values}]
        self._track(step)
        for sink in self.sinks:
            sink.amend(step, values, amended)
        assert self._jsonl is not None
        self._jsonl.close()
        _rewrite_rows(path, amended)
        self._jsonl = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def log_text(self, step: int, tag: str, markdown: str) -> None:
        if self._tb is not None:
            self._tb.add_text(tag, markdown, step)

    def log_samples(self, step: int, tag: str, rows: list[tuple[str, str, float]]) -> None:
        """(prompt, response, reward) rows: a Markdown table in TensorBoard, and each sink's
        own form (a W&B table)."""
        self.log_text(step, tag, samples_markdown(rows))
        self._track(step)
        for sink in self.sinks:
            sink.log_samples(step, tag, rows)

    def log_summaries(self, step: int, summaries: list[Summary]) -> None:
        """Write prepared summaries (HParams, custom-scalars layout) into the run's own event
        files; ``SummaryWriter.add_hparams`` would put them into a timestamped sub-run."""
        if self._tb is None:
            return
        # torch types ``file_writer`` as None (its __init__ assigns None before creating it)
        file_writer = cast(FileWriter, self._tb.file_writer)
        for summary in summaries:
            file_writer.add_summary(summary, step)
        self._tb.flush()

    def write_summary(self, extra: dict[str, object]) -> Path:
        """Write ``summary.json`` (final value of every metric plus ``extra``) atomically."""
        summary: dict[str, object] = {**_json_record(dict(sorted(self.latest.items())))}
        summary.update(extra)
        path = self.run_dir / SUMMARY_FILE
        if not self.enabled:
            return path
        text = json.dumps(summary, indent=2) + "\n"
        write_file_atomic(path, _text_writer(text))
        return path

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
        for sink in self.sinks:
            sink.close()
        if self.sinks and self._tracked_step is not None:  # a resume may continue their runs
            write_tracked_step(self.run_dir, self._tracked_step, closed=True)
        self.sinks = []  # closed once, also when close is called again


def samples_markdown(rows: list[tuple[str, str, float]]) -> str:
    """(prompt, response, reward) rows -> a Markdown table for TensorBoard's text panel."""
    lines = ["| prompt | response | reward |", "|---|---|---|"]
    for prompt, response, reward in rows:
        cell = response.replace("|", "\\|") or "(empty)"
        lines.append(f"| `{prompt}` | `{cell}` | {reward:.3f} |")
    return "\n".join(lines)
