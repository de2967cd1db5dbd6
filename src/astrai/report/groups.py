"""Jobs grouped over one override (``--mean-over seed``): one row per group of jobs whose other
differing overrides are equal, with the mean ± sample standard deviation over its done jobs."""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from astrai.report.jobs import Job
from astrai.report.table import (
    ReportError,
    differing_keys,
    markdown_table,
    metric_value,
    raw_number,
    short_names,
    text_table,
)

# numeric columns of the grouped table (key -> header); wall time is shown as a mean only
GROUP_COLUMNS: dict[str, str] = {
    "eval/accuracy": "eval/accuracy",
    "best/eval/accuracy": "best eval/acc",
    "rollout/reward_mean": "reward",
    "wall_time_s": "wall time",
}
NOTE = (
    "Values: mean ± sample std (n − 1 in the denominator; none for n = 1) over each group's done "
    "jobs; n counts them, its other jobs (failed, stopped, running, stale, missing) are counted "
    "in brackets, not averaged."
)


@dataclass
class Group:
    """Jobs that differ only in the ``--mean-over`` key."""

    overrides: dict[str, str]  # the group's values of the other differing keys
    jobs: list[Job]

    @property
    def done(self) -> list[Job]:
        """The jobs the values are taken over: those that ran all their steps."""
        return [job for job in self.jobs if job.status == "done"]

    def not_done(self) -> dict[str, int]:
        """How many of the other jobs have each status (``stopped (SIGTERM)`` -> ``stopped``)."""
        return dict(Counter(job.status.split()[0] for job in self.jobs if job.status != "done"))

    def values(self, metric: str) -> list[float]:
        """``metric`` of each done job that has a finite value."""
        values = [metric_value(job, metric) for job in self.done]
        return [v for v in values if v is not None and math.isfinite(v)]

    def mean(self, metric: str) -> float | None:
        return mean_std(self.values(metric))[0]


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """(mean, sample standard deviation); the deviation is None below two values."""
    if not values:
        return None, None
    std = statistics.stdev(values) if len(values) > 1 else None
    return statistics.fmean(values), std


def check_key(jobs: Sequence[Job], key: str) -> str:
    """``key`` without a leading ``+``; a ``ReportError`` when no job overrides it."""
    key = key.lstrip("+")
    known = list(dict.fromkeys(k for job in jobs for k in job.overrides))
    if key not in known:
        raise ReportError(
            f"--mean-over '{key}' is not an override of this sweep (overrides: {', '.join(known)})"
        )
    return key


def group_jobs(jobs: Sequence[Job], key: str) -> list[Group]:
    """Groups of jobs whose differing overrides other than ``key`` are equal (first-seen order)."""
    keys = [k for k in differing_keys(jobs) if k != key]
    groups: dict[tuple[str, ...], Group] = {}
    for job in jobs:
        values = tuple(job.overrides.get(k, "-") for k in keys)
        groups.setdefault(values, Group(dict(zip(keys, values, strict=True)), [])).jobs.append(job)
    return list(groups.values())


def sort_groups(groups: Sequence[Group], metric: str, ascending: bool = False) -> list[Group]:
    """Groups ordered by the mean of ``metric`` (highest first unless ``ascending``); groups
    without a value last, in their order."""
    ranked = sorted(
        (g for g in groups if g.mean(metric) is not None),
        key=lambda g: g.mean(metric) or 0.0,
        reverse=not ascending,
    )
    return ranked + [g for g in groups if g.mean(metric) is None]


def group_label(group: Group, names: dict[str, str]) -> str:
    """Legend text: the group's overrides and its number of done jobs."""
    parts = [f"{names[k]}={v}" for k, v in group.overrides.items()]
    return " ".join([*parts, f"(n={len(group.done)})"]) if parts else f"all (n={len(group.done)})"


def group_curve(
    group: Group, metric: str
) -> tuple[list[int], list[float], list[float], list[float]]:
    """(steps, mean, min, max) of ``metric`` over the group's done jobs, at the steps that every
    one of them logged; empty lists when there are none."""
    curves = [dict(zip(*job.curve(metric), strict=True)) for job in group.done]
    if not curves:
        return [], [], [], []
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    at_step = [[c[s] for c in curves] for s in steps]
    means = [statistics.fmean(v) for v in at_step]
    return steps, means, [min(v) for v in at_step], [max(v) for v in at_step]


@dataclass
class GroupTable:
    """The grouped report's rows, formatted for the console and Markdown, raw for CSV."""

    groups: list[Group]
    key: str  # the --mean-over key
    keys: list[str]  # the other differing override keys
    columns: list[str]  # metric column keys

    @classmethod
    def build(cls, jobs: Sequence[Job], key: str, sort: str, ascending: bool = False) -> GroupTable:
        key = check_key(jobs, key)
        groups = sort_groups(group_jobs(jobs, key), sort, ascending)
        columns = list(GROUP_COLUMNS) + ([sort] if sort not in GROUP_COLUMNS else [])
        return cls(groups, key, [k for k in differing_keys(jobs) if k != key], columns)

    def header(self) -> list[str]:
        names = short_names(self.keys)
        metrics = [GROUP_COLUMNS.get(c, c) for c in self.columns]
        return [*(names[k] for k in self.keys), "n", *metrics]

    def cells(self, group: Group) -> list[str]:
        values = [_format(group, c) for c in self.columns]
        return [*(group.overrides[k] for k in self.keys), _format_n(group), *values]

    def rows(self) -> list[list[str]]:
        return [self.header(), *(self.cells(g) for g in self.groups)]

    def to_text(self) -> str:
        return text_table(self.rows())

    def to_markdown(self, title: str) -> str:
        return markdown_table(title, self.rows(), NOTE)

    def write_csv(self, path: Path) -> None:
        """Raw values: full override keys, n, the other jobs' statuses, mean and std per metric,
        the group's job names."""
        stats = [f"{c}_{s}" for c in self.columns for s in ("mean", "std")]
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow([*self.keys, "n", "not_done", *stats, "jobs"])
            for group in self.groups:
                numbers = [mean_std(group.values(c)) for c in self.columns]
                not_done = " ".join(f"{s}:{n}" for s, n in group.not_done().items())
                writer.writerow(
                    [
                        *(group.overrides[k] for k in self.keys),
                        len(group.done),
                        not_done,
                        *(raw_number(v) for pair in numbers for v in pair),
                        " ".join(job.name for job in group.jobs),
                    ]
                )


def _format_n(group: Group) -> str:
    others = ", ".join(f"+{n} {status}" for status, n in group.not_done().items())
    return f"{len(group.done)} ({others})" if others else str(len(group.done))


def _format(group: Group, column: str) -> str:
    mean, std = mean_std(group.values(column))
    if mean is None:
        return "-"
    if column == "wall_time_s":
        return f"{mean:.1f}s"
    text = f"{mean:.3f}" if abs(mean) < 1e4 else f"{mean:.3g}"
    return text if std is None else f"{text} ± {std:.3f}"
