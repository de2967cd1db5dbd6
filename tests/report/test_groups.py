"""``astrai.report --mean-over KEY`` on a hand-made sweep: groups, mean ± sample std, files."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from PIL import Image
from tests.report.sweep_dirs import make_job, make_rows, make_summary

from astrai.report.__main__ import main
from astrai.report.groups import NOTE, GroupTable, group_curve, group_label, mean_std
from astrai.report.jobs import load_sweep
from astrai.report.plot import curve_counts, plot_group_curves

ERROR_LOG = "[2026-01-01 00:00:01,000][astrai.train][ERROR] - stopped: out of memory\n"


@pytest.fixture
def seeds(tmp_path: Path) -> Path:
    """loss_agg=token × seeds 0,1,2; loss_agg=seq × seeds 0,1 (+ seed 2 failed); loss_agg=mean ×
    seed 0. ``_rows``: eval/accuracy from step 0, reward = r × step and 1.5 s per step from 1."""
    sweep = tmp_path / "sweep"
    jobs = [  # (loss_agg, seed, eval/accuracy per step, reward per step)
        ("token", 0, [0.0, 0.6, 0.5], 0.1),  # final 0.5, best 0.6, reward 0.2, 3.0 s
        ("token", 1, [0.0, 0.3, 0.7], 0.2),  # final 0.7, best 0.7, reward 0.4, 3.0 s
        ("token", 2, [0.0, 0.9, 0.8, 0.9], 0.2),  # final 0.9, best 0.9, reward 0.6, 4.5 s
        ("seq", 0, [0.0, 0.1, 0.2], 0.1),  # final 0.2, reward 0.2
        ("seq", 1, [0.0, 0.3, 0.4], 0.1),  # final 0.4, reward 0.2
        ("mean", 0, [0.0, 0.2, 0.4], 0.05),  # final 0.4, reward 0.1
    ]
    for num, (agg, seed, accuracies, reward) in enumerate(jobs):
        rows = make_rows(accuracies, reward)
        ov = ["train_type=online_ppo", f"seed={seed}", f"train_type.loss_agg={agg}"]
        make_job(sweep, str(num), ov, rows, make_summary(rows))
    failed = ["train_type=online_ppo", "seed=2", "train_type.loss_agg=seq"]
    make_job(
        sweep, "6", failed, make_rows([0.0, 0.99], 0.5), log=ERROR_LOG
    )  # best of all, left out
    return sweep


def test_mean_and_sample_std() -> None:
    mean, std = mean_std([0.5, 0.7, 0.9])
    assert mean == pytest.approx(0.7)
    assert std == pytest.approx(0.2)  # sqrt((0.04 + 0 + 0.04) / (3 - 1))
    assert mean_std([0.4]) == (0.4, None)
    assert mean_std([]) == (None, None)


def test_groups_over_seed_by_hand(seeds: Path) -> None:
    table = GroupTable.build(load_sweep(seeds), "seed", "eval/accuracy")
    assert table.key == "seed" and table.keys == ["train_type.loss_agg"]
    token, mean, seq = table.groups  # by mean final accuracy: 0.7, 0.4, 0.3
    assert [g.overrides for g in table.groups] == [
        {"train_type.loss_agg": "token"},
        {"train_type.loss_agg": "mean"},
        {"train_type.loss_agg": "seq"},
    ]
    assert [j.name for j in seq.jobs] == ["3", "4", "6"] and len(seq.done) == 2
    assert seq.not_done() == {"failed": 1}
    assert mean_std(seq.values("eval/accuracy")) == pytest.approx((0.3, 0.02**0.5))
    # best: 0.6, 0.7, 0.9 -> mean 2.2/3; squared deviations (1/30)² · (4² + 1² + 5²) = 0.42/9
    assert mean_std(token.values("best/eval/accuracy")) == pytest.approx(
        (2.2 / 3, (0.21 / 9) ** 0.5)
    )
    assert mean_std(token.values("rollout/reward_mean")) == pytest.approx((0.4, 0.2))
    assert token.mean("wall_time_s") == pytest.approx(3.5)  # (3.0 + 3.0 + 4.5) / 3
    ascending = GroupTable.build(load_sweep(seeds), "+seed", "eval/accuracy", ascending=True)
    assert [g.overrides["train_type.loss_agg"] for g in ascending.groups] == [
        "seq",
        "mean",
        "token",
    ]


def test_group_curve_is_the_mean_at_the_steps_all_jobs_logged(seeds: Path) -> None:
    token = GroupTable.build(load_sweep(seeds), "seed", "eval/accuracy").groups[0]
    steps, means, lows, highs = group_curve(token, "eval/accuracy")
    assert steps == [0, 1, 2]  # seed 2's step 3 is not in the others
    assert means == pytest.approx([0.0, 0.6, 2.0 / 3])  # (0.6+0.3+0.9)/3, (0.5+0.7+0.8)/3
    assert lows == pytest.approx([0.0, 0.3, 0.5]) and highs == pytest.approx([0.0, 0.9, 0.8])
    steps, means, _, _ = group_curve(token, "rollout/reward_mean")
    assert steps == [1, 2] and means == pytest.approx([0.5 / 3, 1.0 / 3])  # no reward at step 0


def test_plot_draws_one_curve_and_one_band_per_group(seeds: Path) -> None:
    table = GroupTable.build(load_sweep(seeds), "seed", "eval/accuracy")
    labels = [group_label(g, {"train_type.loss_agg": "loss_agg"}) for g in table.groups]
    assert labels == ["loss_agg=token (n=3)", "loss_agg=mean (n=1)", "loss_agg=seq (n=2)"]
    fig = plot_group_curves(table.groups, labels)
    assert curve_counts(fig) == {"rollout/reward_mean": 3, "eval/accuracy": 3}
    accuracy_ax = fig.axes[1]
    assert len(accuracy_ax.collections) == 2  # min-max bands; none for the group with n=1
    line = {ln.get_label(): ln for ln in accuracy_ax.get_lines()}["loss_agg=seq (n=2)"]
    assert list(line.get_xdata()) == [0, 1, 2]
    assert list(line.get_ydata()) == pytest.approx([0.0, 0.2, 0.3])


def test_cli_mean_over_writes_grouped_table_csv_and_png(seeds: Path, capsys) -> None:  # noqa: ANN001
    assert main([str(seeds), "--mean-over", "seed"]) == 0
    out = capsys.readouterr().out.splitlines()
    title = f"Sweep {seeds}: 3 groups of 7 jobs, mean over seed, sorted by mean eval/accuracy"
    assert out[-7:-1] == [  # after the per-job table and a blank line
        f"{title} (highest first)",
        NOTE,
        "loss_agg  n              eval/accuracy  best eval/acc  reward         wall time",
        "token     3              0.700 ± 0.200  0.733 ± 0.153  0.400 ± 0.200  3.5s",
        "mean      1              0.400          0.400          0.100          3.0s",
        "seq       2 (+1 failed)  0.300 ± 0.141  0.300 ± 0.141  0.200 ± 0.000  3.0s",
    ]
    assert out[-1] == (
        "wrote report_mean.csv, report_mean.md, report_mean.png "
        f"(rollout/reward_mean: 3, eval/accuracy: 3 curves) to {seeds}"
    )
    assert (seeds / "report_mean.md").read_text() == (
        f"# {title} (highest first)\n\n{NOTE}\n\n"
        "| loss_agg | n | eval/accuracy | best eval/acc | reward | wall time |\n"
        "|---|---|---|---|---|---|\n"
        "| token | 3 | 0.700 ± 0.200 | 0.733 ± 0.153 | 0.400 ± 0.200 | 3.5s |\n"
        "| mean | 1 | 0.400 | 0.400 | 0.100 | 3.0s |\n"
        "| seq | 2 (+1 failed) | 0.300 ± 0.141 | 0.300 ± 0.141 | 0.200 ± 0.000 | 3.0s |\n"
    )
    with (seeds / "report_mean.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["train_type.loss_agg"] for r in rows] == ["token", "mean", "seq"]
    assert float(rows[0]["eval/accuracy_mean"]) == pytest.approx(0.7)
    assert float(rows[0]["eval/accuracy_std"]) == pytest.approx(0.2)
    assert rows[1]["eval/accuracy_std"] == ""  # n = 1
    assert rows[2]["n"] == "2" and rows[2]["not_done"] == "failed:1" and rows[2]["jobs"] == "3 4 6"
    with (seeds / "report.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 7  # the per-job report as without the flag
    with Image.open(seeds / "report_mean.png") as image:
        assert image.format == "PNG" and image.size[0] > 600


def test_the_only_differing_key_makes_one_group(tmp_path: Path) -> None:
    for seed, accuracies in enumerate([[0.0, 0.2], [0.0, 0.6]]):
        rows = make_rows(accuracies, 0.1)
        make_job(
            tmp_path, str(seed), ["train_type=online_ppo", f"seed={seed}"], rows, make_summary(rows)
        )
    table = GroupTable.build(load_sweep(tmp_path), "seed", "eval/accuracy")
    assert table.keys == [] and len(table.groups) == 1
    assert table.rows()[1] == ["2", "0.400 ± 0.283", "0.400 ± 0.283", "0.100 ± 0.000", "1.5s"]
    assert group_label(table.groups[0], {}) == "all (n=2)"


def test_unknown_key_is_one_line_and_exit_2(seeds: Path, capsys) -> None:  # noqa: ANN001
    assert main([str(seeds), "--mean-over", "sed"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "astrai.report: --mean-over 'sed' is not an override of this sweep "
        "(overrides: train_type, seed, train_type.loss_agg)\n"
    )
    assert not (seeds / "report.csv").exists() and not (seeds / "report_mean.md").exists()
