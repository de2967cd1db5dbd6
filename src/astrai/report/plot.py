"""``report.png``: reward and eval-accuracy curves of every job on shared axes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from astrai.report.jobs import Job

PANELS: tuple[tuple[str, str], ...] = (
    ("rollout/reward_mean", "rollout reward (mean)"),
    ("eval/accuracy", "eval accuracy (greedy, held-out)"),
)


def plot_curves(jobs: Sequence[Job], labels: dict[str, str]) -> Figure:
    """One panel per metric in ``PANELS``, one line per job (same colour in every panel),
    legend = the job's differing overrides. Jobs without logged values are left out."""
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    FigureCanvasAgg(fig)  # the Agg canvas: no display, no pyplot state
    axes = fig.subplots(1, len(PANELS), sharex=True)
    colours = {job.name: f"C{i % 10}" for i, job in enumerate(jobs)}
    for ax, (metric, title) in zip(axes, PANELS, strict=True):
        for job in jobs:
            steps, values = job.curve(metric)
            if steps:
                style = "-" if job.status == "done" else "--"
                ax.plot(
                    steps,
                    values,
                    style,
                    marker="." if len(steps) <= 30 else None,  # dots only on short curves
                    color=colours[job.name],
                    label=labels[job.name],
                )
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="outside right upper", fontsize="small")
    return fig


def write_png(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=100)


def curve_counts(fig: Figure) -> dict[str, int]:
    """Lines drawn per panel (metric name -> count)."""
    return {metric: len(ax.get_lines()) for ax, (metric, _) in zip(fig.axes, PANELS, strict=False)}
