"""``report.png`` keeps every job visible: a job whose curves equal another's is drawn dashed
over it, in turns, and says so in the legend; the step axis has whole-number ticks (checked on
the drawn figure: the pixels of each colour inside each panel, the tick positions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from tests.report.sweep_dirs import make_job, make_rows, make_summary

from astrai.report.groups import Group
from astrai.report.jobs import Job, load_sweep
from astrai.report.plot import plot_curves, plot_group_curves, repeats, shared_dashes

COLOUR_TOLERANCE = 0.06  # per RGB channel: antialiased edges blend, a line's core does not


@pytest.fixture
def twins(tmp_path: Path) -> list[Job]:
    """Jobs 0 and 1 logged the same values (a key that changed nothing); job 2 differs."""
    sweep = tmp_path / "sweep"
    same = make_rows([0.0, 0.25, 0.5, 0.5, 0.75], reward=0.2)
    for name, seed in (("0", 1), ("1", 2)):
        make_job(sweep, name, [f"seed={seed}"], same, make_summary(same))
    other = make_rows([0.0, 0.1, 0.2, 0.3, 0.4], reward=0.1)
    make_job(sweep, "2", ["seed=3"], other, make_summary(other))
    return load_sweep(sweep)


def _pixels(fig: Figure, colours: tuple[str, ...]) -> list[list[int]]:
    """``fig`` drawn once: per panel, the pixels of each of ``colours`` inside its axes."""
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())[..., :3] / 255.0  # type: ignore[attr-defined]
    height = image.shape[0]
    counts = []
    for ax in fig.axes:
        box = ax.get_window_extent()
        inside = image[int(height - box.y1) : int(height - box.y0), int(box.x0) : int(box.x1)]
        counts.append(
            [
                int((np.abs(inside - np.array(to_rgb(c))).max(axis=-1) < COLOUR_TOLERANCE).sum())
                for c in colours
            ]
        )
    return counts


def test_a_repeated_curve_leaves_the_one_under_it_visible(twins: list[Job]) -> None:
    fig = plot_curves(twins, {job.name: f"job {job.name}" for job in twins})
    for under, over in _pixels(fig, ("C0", "C1")):
        # before: job 1's line covered job 0's exactly (0 pixels of C0 left in the panel)
        assert under > 0.3 * over > 0, (under, over)
    reward_ax = fig.axes[0]
    labels = [line.get_label() for line in reward_ax.get_lines()]
    assert labels == ["job 0", "job 1 (same curves as job 0)", "job 2"]
    styles = [line.get_linestyle() for line in reward_ax.get_lines()]
    assert styles[0] == "-" and styles[2] == "-" and styles[1] == "--"  # dashed: the copy
    for ax in fig.axes:  # steps are whole numbers (before: 0.0, 0.5, 1.0, ... 4.0)
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks == [0.0, 1.0, 2.0, 3.0, 4.0], ticks


def test_the_legend_notes_a_curve_repeated_in_one_panel_only(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    first = make_rows([0.0, 0.5, 0.5], reward=0.2)
    second = make_rows([0.0, 0.5, 0.5], reward=0.3)  # same accuracy, another reward
    make_job(sweep, "0", ["seed=1"], first, make_summary(first))
    make_job(sweep, "1", ["seed=2"], second, make_summary(second))
    jobs = load_sweep(sweep)
    fig = plot_curves(jobs, {job.name: f"job {job.name}" for job in jobs})
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == ["job 0", "job 1 (eval/accuracy same as job 0)"]


def test_copies_take_turns_along_the_line() -> None:
    """Three copies, turns of 6 points: the solid first one shows in [0, 6) of each 18, copy 1
    (offset 12: its "on" starts 6 points in) in [6, 12), copy 2 (offset 6) in [12, 18)."""
    assert shared_dashes(1, 2) == (6.0, (6.0, 6.0))
    assert shared_dashes(1, 3) == (12.0, (6.0, 12.0))
    assert shared_dashes(2, 3) == (6.0, (6.0, 12.0))


def test_repeats_finds_every_later_copy(twins: list[Job]) -> None:
    from astrai.report.plot import Curve

    def curve(values: list[float], owner: str) -> Curve:
        return Curve([0, 1], values, "C0", "-", owner, owner)

    curves = [curve([1, 2], "a"), curve([1, 3], "b"), curve([1, 2], "c"), curve([1, 2], "d")]
    assert repeats(curves) == {2: (0, 1, 3), 3: (0, 2, 3)}


def test_group_means_that_repeat_stay_visible(twins: list[Job]) -> None:
    groups = [Group({"seed": "1"}, [twins[0]]), Group({"seed": "2"}, [twins[1]])]
    fig = plot_group_curves(groups, ["seed 1", "seed 2"])
    assert [line.get_label() for line in fig.axes[1].get_lines()] == [
        "seed 1",
        "seed 2 (same curves as seed 1)",
    ]
    under, over = _pixels(fig, ("C0", "C1"))[1]
    assert under > 0.3 * over > 0, (under, over)
