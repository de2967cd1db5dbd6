"""``report.png``: reward and eval-accuracy curves of every job on shared axes;
``report_mean.png``: the mean curve of every group of jobs, with a min-max band.

Two jobs with the same curve (the same seed and a key that changed nothing, a rerun) would draw
one line over the other and hide it. Every later copy of a curve is drawn dashed, in turns with
the earlier ones (``shared_dashes``), so each colour shows along the line, and its legend entry
names the job it repeats. Steps are whole numbers: the x ticks are integers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from astrai.report.groups import Group, group_curve
from astrai.report.jobs import Job

PANELS: tuple[tuple[str, str], ...] = (
    ("rollout/reward_mean", "rollout reward (mean)"),
    ("eval/accuracy", "eval accuracy (greedy, held-out)"),
)
MAX_MARKED_POINTS = 30  # dots only on short curves
DASH_POINTS = 6.0  # length of each copy's turn along a repeated curve (points)


@dataclass(frozen=True)
class Curve:
    """One line to draw: its points, colour, line style (``-``, ``--``...), legend label and
    what it belongs to (``owner``: a job's name, a group's index; the same in every panel)."""

    steps: list[int]
    values: list[float]
    colour: str
    style: str
    label: str
    owner: str


def shared_dashes(copy: int, copies: int) -> tuple[float, tuple[float, float]]:
    """The dash pattern of copy ``copy`` (1..``copies``-1) of a curve drawn ``copies`` times:
    on for one turn, off for the others', shifted so that along the line the first copy (solid,
    underneath) shows in turn 0, copy ``k`` in turn ``k``; ``(offset, (on, off))`` in points."""
    return ((copies - copy) * DASH_POINTS, (DASH_POINTS, (copies - 1) * DASH_POINTS))


def repeats(curves: Sequence[Curve]) -> dict[int, tuple[int, int, int]]:
    """For every curve equal to an earlier one (same steps, same values): its index ->
    ``(first, copy, copies)``: the index of the first curve with those points, its own rank
    among the curves with them (1, 2...) and how many there are."""
    same: dict[tuple[tuple[int, ...], tuple[float, ...]], list[int]] = defaultdict(list)
    for i, curve in enumerate(curves):
        same[(tuple(curve.steps), tuple(curve.values))].append(i)
    return {
        index: (indices[0], copy, len(indices))
        for indices in same.values()
        for copy, index in enumerate(indices)
        if copy > 0
    }


def draw_curves(ax: Axes, curves: Sequence[Curve]) -> dict[int, int]:
    """Draw ``curves`` on ``ax`` in order, each later copy of a curve dashed in turns with the
    earlier ones (``shared_dashes``); returns copy index -> index of the curve it repeats."""
    copies = repeats(curves)
    for i, curve in enumerate(curves):
        marker = "." if len(curve.steps) <= MAX_MARKED_POINTS else None
        line = ax.plot(curve.steps, curve.values, curve.style, marker=marker,
                       color=curve.colour, label=curve.label)[0]  # fmt: skip
        if i in copies:
            _, copy, count = copies[i]
            line.set_linestyle(shared_dashes(copy, count))
    return {i: first for i, (first, _, _) in copies.items()}


def repeat_note(label: str, repeated: dict[str, str]) -> str:
    """``label`` with what it repeats: ``(same curve as B)`` when it repeats job B in every
    panel named in ``repeated`` (metric -> B's label), else one note per metric."""
    if not repeated:
        return label
    others = set(repeated.values())
    if len(others) == 1 and len(repeated) == len(PANELS):
        return f"{label} (same curves as {others.pop()})"
    notes = "; ".join(f"{metric} same as {other}" for metric, other in repeated.items())
    return f"{label} ({notes})"


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
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no step 2.5
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="outside right upper", fontsize="small")
    return fig


def plot_curves(jobs: Sequence[Job], labels: dict[str, str]) -> Figure:
    """One panel per metric in ``PANELS``, one line per job (same colour in every panel),
    legend = the job's differing overrides. Jobs without logged values are left out; a job
    whose curve repeats an earlier job's is dashed over it and says so in the legend."""
    fig, axes = _figure()
    colours = {job.name: f"C{i % 10}" for i, job in enumerate(jobs)}
    panels = []
    for metric, _ in PANELS:
        curves = []
        for job in jobs:
            steps, values = job.curve(metric)
            if steps:
                style = "-" if job.status == "done" else "--"
                curve = Curve(steps, values, colours[job.name], style, labels[job.name], job.name)
                curves.append(curve)
        panels.append(curves)
    _draw_panels(axes, panels)
    return _finish(fig, axes)


GROUP_LINE_STYLES = ("-", "--", ":", "-.")


def plot_group_curves(groups: Sequence[Group], labels: Sequence[str]) -> Figure:
    """One panel per metric in ``PANELS``, one line per group: the mean over its done jobs at
    the steps all of them logged, shaded from their min to their max. Groups without a done job
    that logged the metric are left out."""
    fig, axes = _figure()
    panels = []
    for ax, (metric, _) in zip(axes, PANELS, strict=True):
        curves = []
        for i, (group, label) in enumerate(zip(groups, labels, strict=True)):
            steps, means, lows, highs = group_curve(group, metric)
            if not steps:
                continue
            # ten colours, then the next ten groups dashed, ...: no two lines look alike
            style = GROUP_LINE_STYLES[(i // 10) % len(GROUP_LINE_STYLES)]
            curves.append(Curve(steps, means, f"C{i % 10}", style, label, str(i)))
            if len(group.done) > 1:
                ax.fill_between(steps, lows, highs, color=f"C{i % 10}", alpha=0.2, linewidth=0)
        panels.append(curves)
    _draw_panels(axes, panels)
    return _finish(fig, axes)


def _draw_panels(axes: list[Axes], panels: list[list[Curve]]) -> None:
    """Each panel's curves (``draw_curves``); a curve that repeats another in some panel gets
    that noted in its label (the legend is the first panel's; the note covers every panel)."""
    repeated: dict[str, dict[str, str]] = defaultdict(dict)  # owner -> metric -> earlier label
    for ax, curves, (metric, _) in zip(axes, panels, PANELS, strict=True):
        for copy, first in draw_curves(ax, curves).items():
            repeated[curves[copy].owner][metric] = curves[first].label
    for ax, curves in zip(axes, panels, strict=True):
        for line, curve in zip(ax.get_lines(), curves, strict=True):
            line.set_label(repeat_note(curve.label, repeated.get(curve.owner, {})))


def write_png(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=100)


def curve_counts(fig: Figure) -> dict[str, int]:
    """Lines drawn per panel (metric name -> count); bands are not lines."""
    return {metric: len(ax.get_lines()) for ax, (metric, _) in zip(fig.axes, PANELS, strict=False)}
