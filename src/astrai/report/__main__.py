"""``python -m astrai.report SWEEP_DIR [--sort METRIC] [--ascending] [--mean-over KEY] [--out DIR]``

Prints one row per job (the overrides that differ between jobs, final and best
``eval/accuracy``, final reward, explained variance, steps, wall time, status), sorted by a metric
(default: the sweep's ``optimized_metric``, highest first), and writes ``report.csv``,
``report.md`` and ``report.png`` into the sweep dir (or ``--out``). With ``--mean-over KEY``
(e.g. ``seed``) it also prints one row per group of jobs whose other differing overrides are
equal: n done jobs, mean ± sample std of final and best ``eval/accuracy`` and final reward, mean
wall time, sorted by the group mean; and writes ``report_mean.csv``, ``report_mean.md`` and
``report_mean.png`` (one mean curve per group, shaded from min to max). Works on a running sweep
and on one with failed jobs. Exit status: 0, or 2 on bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from astrai.cli_errors import ArgumentParser, one_line_errors
from astrai.report.groups import NOTE, GroupTable, group_label
from astrai.report.jobs import STALE_AFTER_S, Job, load_sweep
from astrai.report.table import ReportError, Table, job_label, short_names

DEFAULT_METRIC = "eval/accuracy"


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m astrai.report", description="Compare the jobs of a sweep."
    )
    parser.add_argument("sweep_dir", type=Path, help="a multirun sweep dir (or one run dir)")
    parser.add_argument(
        "--sort", default=None, help="metric to sort by (default: the sweep's optimized_metric)"
    )
    parser.add_argument("--ascending", action="store_true", help="lowest first")
    parser.add_argument(
        "--mean-over",
        metavar="KEY",
        default=None,
        help="also report groups of jobs that differ only in this override (e.g. seed): "
        "mean ± sample std; writes report_mean.{csv,md,png}",
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write report.* files")
    parser.add_argument(
        "--stale-after",
        type=float,
        default=STALE_AFTER_S / 60,
        help="minutes without a write after which a job without summary is 'stale'",
    )
    return parser


def _default_metric(jobs: list[Job]) -> str:
    metrics = [j.optimized_metric for j in jobs if j.optimized_metric]
    return metrics[0] if metrics else DEFAULT_METRIC


def eval_basis(jobs: list[Job], metric: str) -> str:
    """What an ``eval/*`` ranking rests on, from the summaries' ``evaluated_prompts``:
    ``; eval/* over 13 held-out prompts`` (``over 4-13`` when the jobs differ); "" for another
    metric or summaries written before the count was."""
    counts = {job.summary.get("evaluated_prompts") for job in jobs if job.summary}
    counts.discard(None)
    if not metric.startswith("eval/") or not counts:
        return ""
    numbers = sorted(int(c) for c in counts if isinstance(c, int | float))
    if not numbers:
        return ""
    span = str(numbers[0]) if len(numbers) == 1 else f"{numbers[0]}-{numbers[-1]}"
    return f"; eval/* over {span} held-out prompts"


def _write_job_report(jobs: list[Job], table: Table, title: str, out: Path) -> None:
    from astrai.report.plot import curve_counts, plot_curves, write_png  # matplotlib: slow

    table.write_csv(out / "report.csv")
    (out / "report.md").write_text(table.to_markdown(title), encoding="utf-8")
    names = short_names(table.keys)
    fig = plot_curves(jobs, {job.name: job_label(job, table.keys, names) for job in jobs})
    write_png(fig, out / "report.png")
    print(title)
    print(table.to_text())
    counts = ", ".join(f"{m}: {n}" for m, n in curve_counts(fig).items())
    print(f"wrote report.csv, report.md, report.png ({counts} curves) to {out}")


def _write_group_report(groups: GroupTable, title: str, out: Path) -> None:
    from astrai.report.plot import curve_counts, plot_group_curves, write_png

    groups.write_csv(out / "report_mean.csv")
    (out / "report_mean.md").write_text(groups.to_markdown(title), encoding="utf-8")
    names = short_names(groups.keys)
    fig = plot_group_curves(groups.groups, [group_label(g, names) for g in groups.groups])
    write_png(fig, out / "report_mean.png")
    print()
    print(title)
    print(NOTE)
    print(groups.to_text())
    counts = ", ".join(f"{m}: {n}" for m, n in curve_counts(fig).items())
    print(f"wrote report_mean.csv, report_mean.md, report_mean.png ({counts} curves) to {out}")


def report(
    sweep_dir: Path,
    sort: str | None = None,
    ascending: bool = False,
    out: Path | None = None,
    stale_after_min: float = STALE_AFTER_S / 60,
    mean_over: str | None = None,
) -> Table:
    """Build the table, print it, write ``report.{csv,md,png}`` (and, given ``mean_over``,
    ``report_mean.{csv,md,png}``); raises ``ReportError`` (or ``JobFileError``) before
    writing anything."""
    if not sweep_dir.is_dir():
        raise ReportError(f"no such directory: {sweep_dir}")
    jobs = load_sweep(sweep_dir, stale_after=stale_after_min * 60)
    if not jobs:
        raise ReportError(f"no jobs under {sweep_dir} (no <job>/.hydra/overrides.yaml)")
    metric = sort or _default_metric(jobs)
    table = Table.build(jobs, metric, ascending)
    groups = GroupTable.build(jobs, mean_over, metric, ascending) if mean_over else None
    out = out or sweep_dir
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out}: not a directory")
    out.mkdir(parents=True, exist_ok=True)
    order = "lowest" if ascending else "highest"
    title = f"Sweep {sweep_dir}: {len(jobs)} jobs, sorted by {metric} ({order} first)"
    title += eval_basis(jobs, metric)
    _write_job_report(jobs, table, title, out)
    if groups is not None:
        title = (
            f"Sweep {sweep_dir}: {len(groups.groups)} groups of {len(jobs)} jobs, mean over "
            f"{groups.key}, sorted by mean {metric} ({order} first)"
        )
        _write_group_report(groups, title, out)
    return table


@one_line_errors("astrai.report")
def main(argv: list[str] | None = None) -> int:
    """Exit status 0; bad input, unreadable job files and a full disk: one line, 2."""
    args = _parser().parse_args(argv)
    report(args.sweep_dir, args.sort, args.ascending, args.out, args.stale_after, args.mean_over)
    return 0


if __name__ == "__main__":
    sys.exit(main())
