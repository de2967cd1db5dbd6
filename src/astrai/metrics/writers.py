"""Where metrics go: TensorBoard event files, ``metrics.jsonl`` and ``summary.json``."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, cast

from tensorboard.compat.proto.summary_pb2 import Summary
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.writer import FileWriter

from astrai.files import write_file_atomic
from astrai.metrics.dashboards import tensorboard_run_name

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


class MetricSink(Protocol):
    """A tracker beside TensorBoard (``metrics.wandb_sink``, ``metrics.mlflow_sink``)."""

    def log(self, step: int, values: dict[str, float]) -> None:
        """Scalars at ``step`` (also a second time for one step: an amended evaluation)."""

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
            sample panel; closed with this logger.
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
    ) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.sinks = list(sinks)
        self.latest: dict[str, float] = {}
        self.tb_dir: Path | None = None  # where the event files go
        self._jsonl = None
        self._tb = None
        if not enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            self._truncate_after(resume_step)
        self._jsonl = open(self.run_dir / METRICS_FILE, "a", encoding="utf-8")  # noqa: SIM115
        if tensorboard:
            self.tb_dir = tensorboard_dir(self.run_dir, tb_run, resume_step is not None)
            self._tb = SummaryWriter(
                str(self.tb_dir),
                flush_secs=flush_secs,
                purge_step=resume_step + 1 if resume_step is not None else None,
            )

    def _truncate_after(self, step: int) -> None:
        """Keep the rows with ``step <= step`` (rewritten atomically) and replay them into
        ``latest``; a malformed row before the last is a ``MetricsFileError`` (see
        ``read_metrics_for_resume``)."""
        path = self.run_dir / METRICS_FILE
        if not path.is_file():
            return
        rows = read_metrics_for_resume(path) if step >= 0 else []
        kept = [row for row in rows if row["step"] <= step]
        for row in kept:
            self.latest.update({k: v for k, v in row.items() if k != "step"})
        _rewrite_rows(path, kept)

    def _record(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        """``metrics`` as sorted floats, kept in ``latest`` and written to TensorBoard."""
        values = {name: float(value) for name, value in sorted(metrics.items())}
        self.latest.update(values)
        if self._tb is not None:
            for name, value in values.items():
                self._tb.add_scalar(name, value, step)
        for sink in self.sinks:
            sink.log(step, values)
        return values

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
        values = self._record(step, metrics)
        assert self._jsonl is not None
        self._jsonl.close()
        _rewrite_rows(path, [*rows[:-1], {**rows[-1], **values}])
        self._jsonl = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def log_text(self, step: int, tag: str, markdown: str) -> None:
        if self._tb is not None:
            self._tb.add_text(tag, markdown, step)

    def log_samples(self, step: int, tag: str, rows: list[tuple[str, str, float]]) -> None:
        """(prompt, response, reward) rows: a Markdown table in TensorBoard, and each sink's
        own form (a W&B table)."""
        self.log_text(step, tag, samples_markdown(rows))
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
        self.sinks = []  # closed once, also when close is called again


def samples_markdown(rows: list[tuple[str, str, float]]) -> str:
    """(prompt, response, reward) rows -> a Markdown table for TensorBoard's text panel."""
    lines = ["| prompt | response | reward |", "|---|---|---|"]
    for prompt, response, reward in rows:
        cell = response.replace("|", "\\|") or "(empty)"
        lines.append(f"| `{prompt}` | `{cell}` | {reward:.3f} |")
    return "\n".join(lines)
