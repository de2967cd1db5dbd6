"""``report.png``: reward and eval-accuracy curves of every job on shared axes;
``report_mean.png``: the mean curve of every group of jobs, with a min-max band."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from astrai.report.groups import Group, group_curve
from astrai.report.jobs import Job

PANELS: tuple[tuple[str, str], ...] = (
    ("rollout/reward_mean", "rollout reward (mean)"),
    ("eval/accuracy", "eval accuracy (greedy, held-out)"),
)
MAX_MARKED_POINTS = 30  # dots only on short curves


def _figure() -> tuple[Figure, list[Axes]]:
    """One panel per metric in ``PANELS`` on the Agg canvas (no display, no pyplot state)."""
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(fig.subplots(1, len(PANELS), sharex=True))


def _finish(fig: Figure, axes: list[Axes]) -> Figure:
    """Titles, labels, grid, and the first panel's legend outside on the right."""
    for ax, (metric, title) in zip(axes, PANELS, strict=True):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="outside right upper", fontsize="small")
    return fig


def plot_curves(jobs: Sequence[Job], labels: dict[str, str]) -> Figure:
    """One panel per metric in ``PANELS``, one line per job (same colour in every panel),
    legend = the job's differing overrides. Jobs without logged values are left out."""
    fig, axes = _figure()
    colours = {job.name: f"C{i % 10}" for i, job in enumerate(jobs)}
    for ax, (metric, _) in zip(axes, PANELS, strict=True):
        for job in jobs:
            steps, values = job.curve(metric)
            if steps:
                style = "-" if job.status == "done" else "--"
                marker = "." if len(steps) <= MAX_MARKED_POINTS else None
                ax.plot(steps, values, style, marker=marker, color=colours[job.name],
                        label=labels[job.name])  # fmt: skip
    return _finish(fig, axes)


GROUP_LINE_STYLES = ("-", "--", ":", "-.")


def plot_group_curves(groups: Sequence[Group], labels: Sequence[str]) -> Figure:
    """One panel per metric in ``PANELS``, one line per group: the mean over its done jobs at
    the steps all of them logged, shaded from their min to their max. Groups without a done job
    that logged the metric are left out."""
    fig, axes = _figure()
    for ax, (metric, _) in zip(axes, PANELS, strict=True):
        for i, (group, label) in enumerate(zip(groups, labels, strict=True)):
            steps, means, lows, highs = group_curve(group, metric)
            if not steps:
                continue
            marker = "." if len(steps) <= MAX_MARKED_POINTS else None
            # ten colours, then the next ten groups dashed, ...: no two lines look alike
            style = GROUP_LINE_STYLES[(i // 10) % len(GROUP_LINE_STYLES)]
            ax.plot(steps, means, style, marker=marker, color=f"C{i % 10}", label=label)
            if len(group.done) > 1:
                ax.fill_between(steps, lows, highs, color=f"C{i % 10}", alpha=0.2, linewidth=0)
    return _finish(fig, axes)


def write_png(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=100)


def curve_counts(fig: Figure) -> dict[str, int]:
    """Lines drawn per panel (metric name -> count); bands are not lines."""
    return {metric: len(ax.get_lines()) for ax, (metric, _) in zip(fig.axes, PANELS, strict=False)}
