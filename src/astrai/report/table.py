"""The sweep table: one row per job, the overrides that differ, final metrics; text/CSV/Markdown."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from astrai.report.jobs import Job

# numeric columns every report has (key -> header); "best/" is the best logged value
COLUMNS: dict[str, str] = {
    "eval/accuracy": "eval/accuracy",
    "best/eval/accuracy": "best eval/acc (step)",
    "rollout/reward_mean": "reward",
    "value/explained_variance": "expl. var",
    "step": "steps",
    "wall_time_s": "wall time",
}
BEST_PREFIX = "best/"


class ReportError(ValueError):
    """Bad input to the report (reported as one line, non-zero exit)."""


def differing_keys(jobs: Sequence[Job]) -> list[str]:
    """Override keys whose value is not the same in every job (in first-seen order)."""
    keys: list[str] = []
    for job in jobs:
        keys += [k for k in job.overrides if k not in keys]
    return [k for k in keys if len({job.overrides.get(k) for job in jobs}) > 1]


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """The shortest dotted suffix of each key that no other key ends with
    (``train_type.ppo_gamma`` -> ``ppo_gamma``)."""
    names = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            suffix = ".".join(parts[-n:])
            others = [k for k in keys if k != key]
            if not any(k == suffix or k.endswith("." + suffix) for k in others):
                break
        names[key] = suffix
    return names


def job_label(job: Job, keys: Sequence[str], names: dict[str, str]) -> str:
    """Legend text: the differing overrides (or the job's name when nothing differs)."""
    parts = [f"{names[k]}={job.overrides[k]}" for k in keys if k in job.overrides]
    return " ".join(parts) if parts else f"job {job.name}"


def metric_value(job: Job, key: str) -> float | None:
    """A column's value for one job; ``best/<m>`` is the best logged value of ``m``."""
    if key.startswith(BEST_PREFIX):
        return job.best(key[len(BEST_PREFIX) :])[0]
    if key == "step":
        return None if job.step is None else float(job.step)
    if key == "wall_time_s":
        # the whole run's wall time (summed over resumes); older runs: the summary's
        elapsed = job.final("time/elapsed_s")
        return elapsed if elapsed is not None else job.final("wall_time_s")
    return job.final(key)


def known_metrics(jobs: Sequence[Job]) -> set[str]:
    """Every key ``--sort`` accepts: the table's columns, any logged or summary metric and
    ``best/<metric>``."""
    names = set(COLUMNS)
    for job in jobs:
        logged = {k for row in job.history for k in row}
        logged |= {
            k
            for k, v in job.summary.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        logged.discard("step")
        names |= logged | {BEST_PREFIX + k for k in logged}
    return names


def sort_jobs(jobs: Sequence[Job], metric: str, ascending: bool = False) -> list[Job]:
    """Jobs ordered by ``metric`` (highest first unless ``ascending``); jobs without a value
    last, in job order."""
    if metric not in known_metrics(jobs):
        known = ", ".join(sorted(known_metrics(jobs)))
        raise ReportError(f"unknown sort metric '{metric}' (known: {known})")
    with_value = [(metric_value(j, metric), j) for j in jobs]
    ranked = [(v, j) for v, j in with_value if v is not None and math.isfinite(v)]
    ranked.sort(key=lambda vj: vj[0], reverse=not ascending)
    return [j for _, j in ranked] + [j for v, j in with_value if v is None or not math.isfinite(v)]


@dataclass
class Table:
    """The report's rows, formatted for the console and Markdown, raw for CSV."""

    jobs: list[Job]
    keys: list[str]  # differing override keys
    columns: list[str]  # metric column keys

    @classmethod
    def build(cls, jobs: Sequence[Job], sort: str, ascending: bool = False) -> Table:
        ordered = sort_jobs(jobs, sort, ascending)
        columns = list(COLUMNS) + ([sort] if sort not in COLUMNS else [])
        return cls(ordered, differing_keys(jobs), columns)

    @property
    def shows_node(self) -> bool:
        """A node column when the jobs ran on more than one node (a cluster's launcher spread
        them); on one machine it would repeat the host's name."""
        return len({job.node for job in self.jobs if job.node is not None}) > 1

    def header(self) -> list[str]:
        names = short_names(self.keys)
        metrics = [COLUMNS.get(c, c) for c in self.columns]
        node = ["node"] if self.shows_node else []
        return ["job", *(names[k] for k in self.keys), *metrics, *node, "status"]

    def cells(self, job: Job) -> list[str]:
        values = [_format(job, c) for c in self.columns]
        node = [job.node or "-"] if self.shows_node else []
        overrides = [job.overrides.get(k, "-") for k in self.keys]
        return [job.name, *overrides, *values, *node, job.status]

    def to_text(self) -> str:
        return text_table([self.header(), *(self.cells(j) for j in self.jobs)])

    def to_markdown(self, title: str) -> str:
        return markdown_table(title, [self.header(), *(self.cells(j) for j in self.jobs)])

    def write_csv(self, path: Path) -> None:
        """Raw values: full override keys, unformatted numbers, the job dir and all overrides."""
        columns = [c for c in self.columns if c != "best/eval/accuracy"]
        header = ["job", *self.keys, "best/eval/accuracy", "best_step", *columns]
        header += ["total_steps", "node", "status", "job_dir", "overrides"]
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for job in self.jobs:
                best, best_step = job.best("eval/accuracy")
                overrides = " ".join(f"{k}={v}" if v else k for k, v in job.overrides.items())
                writer.writerow(
                    [
                        job.name,
                        *(job.overrides.get(k, "") for k in self.keys),
                        raw_number(best),
                        "" if best_step is None else best_step,
                        *(raw_number(metric_value(job, c)) for c in columns),
                        "" if job.total_steps is None else job.total_steps,
                        job.node or "",
                        job.status,
                        "" if job.path is None else str(job.path),
                        overrides,
                    ]
                )


def text_table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; ``rows[0]`` is the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def markdown_table(title: str, rows: Sequence[Sequence[str]], note: str = "") -> str:
    """``# title``, an optional paragraph, then the table (``rows[0]`` is the header)."""
    head, *body = rows
    lines = [f"# {title}", "", *([note, ""] if note else [])]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cells in body:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def raw_number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _format(job: Job, column: str) -> str:
    if column == "best/eval/accuracy":
        best, step = job.best("eval/accuracy")
        return "-" if best is None else f"{best:.3f} ({step})"
    value = metric_value(job, column)
    if value is None:
        return "-"
    if column == "step":
        total = f"/{job.total_steps}" if job.total_steps is not None else ""
        return f"{int(value)}{total}"
    if column == "wall_time_s":
        return f"{value:.1f}s"
    return f"{value:.3f}" if abs(value) < 1e4 else f"{value:.3g}"
