"""``astrai.report`` on hand-made sweep dirs: statuses, the differing overrides, sorting, files."""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import pytest
from PIL import Image
from tests.report.sweep_dirs import make_job, make_rows, make_summary

from astrai.report.__main__ import main
from astrai.report.jobs import load_sweep
from astrai.report.plot import plot_curves
from astrai.report.table import ReportError, Table, differing_keys, short_names, sort_jobs


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """Four jobs: done (two), stopped by SIGTERM, still running; job 4 never got a dir."""
    sweep = tmp_path / "sweep"
    grid = [("0.9", "0.9"), ("0.9", "0.95"), ("0.9", "1.0"), ("1.0", "0.9")]  # multirun.yaml order
    ov = [["train_type=online_ppo", f"train_type.ppo_gamma={g}", f"+a.ppo_gae_lambda={lam}"]
          for g, lam in grid]  # fmt: skip
    rows0 = make_rows([0.0, 0.5, 0.25, 0.25, 0.3], reward=0.1)
    make_job(sweep, "0", ov[0], rows0, make_summary(rows0))
    rows1 = make_rows([0.0, 0.2, 0.6, 0.7, 0.8], reward=0.2)
    make_job(sweep, "1", ov[1], rows1, make_summary(rows1))
    rows2 = make_rows([0.0, 0.1, 0.9], reward=0.05)
    make_job(sweep, "2", ov[2], rows2, make_summary(rows2, stopped="SIGTERM"))
    make_job(sweep, "3", ov[3], make_rows([0.0, 0.4], reward=0.3))  # no summary: running
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    _target_: hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
        "\n    params: null\n  overrides:\n    task:\n    - train_type=online_ppo\n"
        "    - train_type.ppo_gamma=0.9,1.0\n    - +a.ppo_gae_lambda=0.9,0.95,1.0\n"
    )
    return sweep


def test_statuses_values_and_missing_jobs(sweep: Path) -> None:
    jobs = {job.name: job for job in load_sweep(sweep)}
    # the grid of multirun.yaml has 6 jobs: 4 dirs, jobs 4 and 5 missing
    assert [jobs[n].status for n in "012345"] == [
        "done", "done", "stopped (SIGTERM)", "running", "missing", "missing"
    ]  # fmt: skip
    assert jobs["4"].overrides == {
        "train_type": "online_ppo",
        "train_type.ppo_gamma": "1.0",
        "a.ppo_gae_lambda": "0.95",
    }
    assert jobs["1"].final("eval/accuracy") == 0.8
    assert jobs["1"].best("eval/accuracy") == (0.8, 4)
    assert jobs["0"].best("eval/accuracy") == (0.5, 1)  # first step that reached the best
    assert jobs["3"].final("rollout/reward_mean") == pytest.approx(0.3)  # latest logged
    assert jobs["3"].step == 1 and jobs["2"].step == 2


def test_failed_stale_and_resumed_jobs(tmp_path: Path) -> None:
    rows = make_rows([0.0, 0.1], reward=0.1)
    error = "[2026-01-01 00:00:01,000][astrai.train][ERROR] - stopped: reward failed on '3+4='\n"
    make_job(tmp_path, "0", ["seed=0"], rows, log=error)
    stale = make_job(tmp_path, "1", ["seed=1"], rows)
    old = time.time() - 3 * 3600
    for path in (stale / "metrics.jsonl", stale / "train.log"):
        os.utime(path, (old, old))
    # stopped at step 1, resumed, now logging past its summary
    resumed = make_rows([0.0, 0.1, 0.2], reward=0.1)
    make_job(
        tmp_path, "2", ["seed=2"], resumed, make_summary(resumed[:2], step=1, stopped="SIGTERM")
    )
    jobs = load_sweep(tmp_path)
    assert [j.status for j in jobs] == ["failed", "stale", "running"]
    assert jobs[2].step == 2  # logged past the summary's step 1


def test_differing_overrides_and_short_names(sweep: Path) -> None:
    jobs = load_sweep(sweep)
    keys = differing_keys(jobs)
    assert keys == ["train_type.ppo_gamma", "a.ppo_gae_lambda"]  # train_type= is the same
    assert short_names(keys) == {
        "train_type.ppo_gamma": "ppo_gamma",
        "a.ppo_gae_lambda": "ppo_gae_lambda",
    }  # noqa: E501
    assert short_names(["x.lr", "y.lr", "z.beta"]) == {
        "x.lr": "x.lr",
        "y.lr": "y.lr",
        "z.beta": "beta",
    }  # noqa: E501


def test_sorting_puts_jobs_without_a_value_last(sweep: Path) -> None:
    jobs = load_sweep(sweep)
    by_acc = [j.name for j in sort_jobs(jobs, "eval/accuracy")]
    assert by_acc == ["2", "1", "3", "0", "4", "5"]  # 0.9, 0.8, 0.4, 0.3, then no value
    ascending = [j.name for j in sort_jobs(jobs, "rollout/reward_mean", ascending=True)]
    assert ascending[:4] == ["2", "3", "0", "1"]  # 0.1, 0.3, 0.4, 0.8
    assert [j.name for j in sort_jobs(jobs, "best/eval/accuracy")][:2] == ["2", "1"]
    with pytest.raises(ReportError, match="unknown sort metric 'eval/acc'"):
        sort_jobs(jobs, "eval/acc")


def test_cli_writes_table_csv_markdown_and_png(sweep: Path, capsys) -> None:  # noqa: ANN001
    assert main([str(sweep), "--sort", "wall_time_s", "--ascending"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Sweep {sweep}: 6 jobs, sorted by wall_time_s (lowest first)"
    assert out[1].split() == [
        "job", "ppo_gamma", "ppo_gae_lambda", "eval/accuracy", "best", "eval/acc", "(step)",
        "reward", "expl.", "var", "steps", "wall", "time", "status",
    ]  # fmt: skip
    assert out[2].split() == ["3", "1.0", "0.9", "0.400", "0.400", "(1)", "0.300", "-",
                              "1/4", "1.5s", "running"]  # fmt: skip
    assert out[-1].endswith(f"(rollout/reward_mean: 4, eval/accuracy: 4 curves) to {sweep}")
    with (sweep / "report.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["job"] for r in rows] == ["3", "2", "0", "1", "4", "5"]  # 1.5, 3.0, 6.0, 6.0 s
    assert rows[3]["eval/accuracy"] == "0.8" and rows[3]["best_step"] == "4"
    assert rows[3]["train_type.ppo_gamma"] == "0.9" and rows[3]["status"] == "done"
    assert rows[4]["status"] == "missing" and rows[4]["eval/accuracy"] == ""
    markdown = (sweep / "report.md").read_text().splitlines()
    assert markdown[2].startswith("| job | ppo_gamma | ppo_gae_lambda | eval/accuracy |")
    assert len([line for line in markdown if line.startswith("| ")]) == 1 + 6
    with Image.open(sweep / "report.png") as image:
        assert image.format == "PNG" and image.size[0] > 600


def test_plot_draws_each_jobs_logged_curve(sweep: Path) -> None:
    jobs = load_sweep(sweep)
    fig = plot_curves(jobs, {job.name: f"job {job.name}" for job in jobs})
    reward_ax, accuracy_ax = fig.axes
    lines = {line.get_label(): line for line in accuracy_ax.get_lines()}
    assert sorted(lines) == ["job 0", "job 1", "job 2", "job 3"]  # missing jobs: no data
    assert list(lines["job 1"].get_xdata()) == [0, 1, 2, 3, 4]
    assert list(lines["job 1"].get_ydata()) == [0.0, 0.2, 0.6, 0.7, 0.8]
    assert list(reward_ax.get_lines()[0].get_xdata()) == [1, 2, 3, 4]  # no reward at step 0


def test_table_of_a_single_run_dir_has_no_override_columns(sweep: Path) -> None:
    (job,) = load_sweep(sweep / "1")
    table = Table.build([job], "eval/accuracy")
    assert table.header()[:2] == ["job", "eval/accuracy"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{tmp}/nope"], "astrai.report: no such directory: {tmp}/nope"),
        (["{tmp}"], "astrai.report: no jobs under {tmp} (no <job>/.hydra/overrides.yaml)"),
        (["{sweep}", "--sort", "nope"], "astrai.report: unknown sort metric 'nope' (known: "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    sweep: Path,
    capsys,
    args: list[str],
    message: str,  # noqa: ANN001
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a.format(tmp=empty, sweep=sweep) for a in args]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(message.format(tmp=empty))
    assert len(captured.err.strip().splitlines()) == 1
    assert not (sweep / "report.csv").exists()


def test_an_eval_ranking_says_how_many_prompts_it_rests_on(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    for name, evaluated in (("0", 13), ("1", 4)):
        rows = make_rows([0.0, 0.5], 0.2)
        summary = make_summary(rows, evaluated_prompts=evaluated, eval_prompts=evaluated)
        make_job(tmp_path, name, [f"seed={name}"], rows, summary)
    assert main([str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("(highest first); eval/* over 4-13 held-out prompts"), first
    assert main([str(tmp_path), "--sort", "wall_time_s"]) == 0  # not an eval/* ranking
    assert capsys.readouterr().out.splitlines()[0].endswith("(highest first)")


def test_node_column_shows_where_each_job_ran_when_jobs_ran_on_several(tmp_path: Path) -> None:
    rows = make_rows([0.0, 0.5], reward=0.5)
    for name, node in (("0", "ray:raylet1"), ("1", "ray:raylet2"), ("2", None)):
        summary = make_summary(rows) if node is None else make_summary(rows, node=node)
        make_job(tmp_path, name, [f"seed={name}"], rows, None if name == "2" else summary)
    table = Table.build(load_sweep(tmp_path), "eval/accuracy")
    assert table.header()[-2:] == ["node", "status"]
    assert {job.name: table.cells(job)[-2] for job in table.jobs} == {
        "0": "ray:raylet1", "1": "ray:raylet2", "2": "-",
    }  # fmt: skip
    table.write_csv(tmp_path / "report.csv")
    with (tmp_path / "report.csv").open() as handle:
        nodes = {r["job"]: r["node"] for r in csv.DictReader(handle)}
    assert nodes == {"0": "ray:raylet1", "1": "ray:raylet2", "2": ""}
    # one node (a local sweep): no column repeating the host's name
    one = Table.build([j for j in load_sweep(tmp_path) if j.name != "1"], "eval/accuracy")
    assert "node" not in one.header()
