"""A real multirun (``python train.py -m``) of the tiny model: the sweep layout, each job's
HParams record and final metrics in its own event files, and ``python -m astrai.report``."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, metadata
from tests.helpers import compose_config, run_main
from tests.train_runs import run_train, run_train_in_process

from astrai.report.__main__ import main as report_main

TINY = [
    "debug=quick",  # conf/debug/quick.yaml; the lines below differ from it
    "trainer.total_steps=3",
    "trainer.progress_bar=false",  # also the preset's: an override, so HParams records a bool
]
# final metrics a sweep compares: the HParams tab shows each scalar's last value
FINAL_METRICS = (
    "eval/accuracy",
    "rollout/reward_mean",
    "value/explained_variance",
    "time/elapsed_s",
)
# the preset's grid (gamma 0.95,0.99,1.0 × lambda 0.9,0.95) with gamma narrowed: 4 jobs
GRID = [(0.95, 0.9), (0.95, 0.95), (1.0, 0.9), (1.0, 0.95)]


def _report(*args: str) -> subprocess.CompletedProcess:
    """``python -m astrai.report args``, its main in this process (the real entry point:
    tests/e2e/test_cli_errors.py)."""
    from astrai.report.__main__ import main

    return run_main(main, list(args))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    args = ["-m", "experiment=ppo_sweep", "train_type.ppo_gamma=0.95,1.0", *TINY]
    # train.py's main in this process (tests/train_runs.py): the basic launcher runs the jobs here
    result = run_train_in_process([*args, f"hydra.sweep.dir={root / 'sweep'}"], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "sweep"


def test_ppo_sweep_preset_composes_the_grid_for_online_ppo() -> None:
    from hydra import compose, initialize_config_dir

    from astrai.config.store import register_configs
    from astrai.paths import CONFIG_DIR

    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", ["experiment=ppo_sweep"], return_hydra_config=True)
        seeds = compose("train", ["experiment=seed_sweep"], return_hydra_config=True)
    assert cfg.train_type._target_ == "astrai.algorithms.ppo.PPOStrategy"
    assert cfg.critic.name == "value_model"
    assert dict(cfg.hydra.sweeper.params) == {
        "train_type.ppo_gamma": "0.95,0.99,1.0",
        "train_type.ppo_gae_lambda": "0.9,0.95",
    }
    assert dict(seeds.hydra.sweeper.params) == {"seed": "0,1,2"}
    compose_config(["experiment=ppo_sweep"])  # and it validates


@pytest.mark.slow  # the fast suite's budget (moved by issue 58): the fixture is a real multirun
def test_each_job_has_its_own_numbered_dir_config_logs_and_checkpoints(sweep: Path) -> None:
    assert (sweep / "multirun.yaml").is_file()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1", "2", "3"]
    checkpoints = set()
    for num, (gamma, lam) in enumerate(GRID):
        job = sweep / str(num)
        config = OmegaConf.load(job / ".hydra" / "config.yaml")
        assert (config.train_type.ppo_gamma, config.train_type.ppo_gae_lambda) == (gamma, lam)
        assert f"train_type.ppo_gamma={gamma}" in OmegaConf.load(job / ".hydra" / "overrides.yaml")
        steps = [json.loads(line)["step"] for line in (job / "metrics.jsonl").open()]
        assert steps == [0, 1, 2, 3]
        assert json.loads((job / "summary.json").read_text())["step"] == 3
        # no collision: each job's final checkpoint is its own, with its own config
        checkpoint = job / "checkpoints" / "step_3"
        saved = OmegaConf.load(checkpoint / "config.yaml")
        assert saved.train_type.ppo_gamma == gamma and saved.train_type.ppo_gae_lambda == lam
        checkpoints.add(checkpoint.resolve())
    assert len(checkpoints) == 4


@pytest.mark.slow  # the fast suite's budget (moved by issue 58): the fixture is a real multirun
def test_each_jobs_event_files_hold_its_hparams_and_final_metrics(sweep: Path) -> None:
    for num, (gamma, lam) in enumerate(GRID):
        job = sweep / str(num)
        # one run per job, named by its swept overrides (in the job's override order)
        (tb,) = (job / "tb").iterdir()
        assert tb.name in {
            f"ppo_gamma={gamma},ppo_gae_lambda={lam}",
            f"ppo_gae_lambda={lam},ppo_gamma={gamma}",
        }
        assert all(p.is_file() for p in tb.iterdir())
        events = EventAccumulator(str(tb), size_guidance={"tensors": 0, "scalars": 0})
        events.Reload()
        start = metadata.parse_session_start_info_plugin_data(
            events.SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content
        )
        hparams = {k: getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
        assert hparams["train_type.ppo_gamma"] == gamma
        assert hparams["train_type.ppo_gae_lambda"] == lam
        assert hparams["train_type"] == "online_ppo" and hparams["experiment"] == "ppo_sweep"
        assert hparams["trainer.total_steps"] == 3.0 and hparams["trainer.progress_bar"] is False
        # no experiment record: TensorBoard builds the columns from every run's session start
        # (test_combined_board_has_every_sweeps_swept_keys_as_hparams_columns)
        assert metadata.EXPERIMENT_TAG not in events.Tags()["tensors"]
        end = metadata.parse_session_end_info_plugin_data(
            events.SummaryMetadata(metadata.SESSION_END_INFO_TAG).plugin_data.content
        )
        assert end.status == api_pb2.STATUS_SUCCESS
        summary = json.loads((job / "summary.json").read_text())
        for tag in FINAL_METRICS:  # the HParams tab shows the last value: the final one
            last = events.Scalars(tag)[-1]
            assert last.step == 3
            assert last.value == pytest.approx(summary[tag], rel=1e-6, abs=1e-6)


@pytest.mark.slow  # the fast suite's budget (moved by issue 58): the fixture is a real multirun
def test_report_table_csv_markdown_and_png(sweep: Path) -> None:
    result = _report(str(sweep), "--sort", "value/explained_variance")
    assert result.returncode == 0, result.stderr
    summaries = [json.loads((sweep / str(n) / "summary.json").read_text()) for n in range(4)]
    explained = [s["value/explained_variance"] for s in summaries]
    order = sorted(range(4), key=lambda n: -explained[n])
    lines = result.stdout.splitlines()
    assert lines[1].split()[:3] == ["job", "ppo_gamma", "ppo_gae_lambda"]  # what differs
    table = [line.split() for line in lines[2:6]]
    assert [row[0] for row in table] == [str(n) for n in order]
    for row in table:
        gamma, lam = GRID[int(row[0])]
        assert (float(row[1]), float(row[2])) == (gamma, lam)
        assert row[-3:-2] == ["3/3"] and row[-1] == "done"
    assert "(rollout/reward_mean: 4, eval/accuracy: 4 curves)" in lines[-1]
    with (sweep / "report.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["job"]) for r in rows] == order
    for row in rows:
        summary = summaries[int(row["job"])]
        for metric in ("eval/accuracy", "rollout/reward_mean", "value/explained_variance"):
            assert float(row[metric]) == pytest.approx(summary[metric])
        assert float(row["wall_time_s"]) == pytest.approx(summary["time/elapsed_s"])
    markdown = (sweep / "report.md").read_text()
    assert markdown.count("| done |") == 4
    assert (sweep / "report.png").stat().st_size > 10_000
    with Image.open(sweep / "report.png") as image:
        assert image.format == "PNG"


@pytest.mark.slow  # ~11 s: copies the sweep and reruns a job
def test_report_marks_running_and_failed_jobs(sweep: Path, tmp_path: Path) -> None:
    # a sweep in progress: job 3 has not written its summary yet
    running = tmp_path / "running"
    shutil.copytree(sweep, running)
    (running / "3" / "summary.json").unlink()
    # a sweep whose second job fails at start (no such checkpoint: exit 2, its dir removed,
    # and the sweep stops there)
    failing = tmp_path / "failing"
    args = ["-m", "ckpt.resume=null,/nonexistent/step_1", *TINY, "trainer.total_steps=1"]
    result = run_train([*args, f"hydra.sweep.dir={failing}"], cwd=tmp_path)
    assert result.returncode == 2
    assert "ckpt.resume: no checkpoint directory" in result.stderr
    statuses = {}
    for sweep_dir in (running, failing):
        assert report_main([str(sweep_dir)]) == 0  # in-process: the CLI's start-up is tested above
        rows = list(csv.DictReader((sweep_dir / "report.csv").open()))
        statuses[sweep_dir.name] = {r["job"]: r["status"] for r in rows}
        assert (sweep_dir / "report.png").stat().st_size > 0
    assert statuses["running"] == {"0": "done", "1": "done", "2": "done", "3": "running"}
    assert statuses["failing"] == {"0": "done", "1": "missing"}


# --- make tensorboard's combined board --------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def _write_session(tb_dir: Path, hparams: dict[str, float | str], accuracy: float) -> None:
    """A run's HParams record and one scalar, as a run writes them (``RunLogger``)."""
    from astrai.metrics.dashboards import hparams_start_summary
    from astrai.metrics.writers import RunLogger

    logger = RunLogger(tb_dir.parents[1], tb_run=tb_dir.name)
    logger.log_summaries(0, [hparams_start_summary(hparams)])
    logger.log(0, {"eval/accuracy": accuracy})
    logger.close()


def _combined_board() -> tuple[api_pb2.Experiment, api_pb2.ListSessionGroupsResponse]:
    """What the HParams plugin of ``make tensorboard``'s board serves for ``root``: the
    Makefile's ``--logdir_spec`` parsed by TensorBoard's own flags, its data ingester and the
    plugin's handlers of the ``/experiment`` and ``/session_groups`` routes, in the working
    directory."""
    import re

    from tensorboard import context, program
    from tensorboard.backend.event_processing.data_ingester import LocalDataIngester
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.core import core_plugin
    from tensorboard.plugins.hparams import backend_context, get_experiment, list_session_groups

    spec = re.search(r"--logdir_spec (\S+)", (REPO / "Makefile").read_text())
    assert spec is not None
    board = program.TensorBoard(plugins=[core_plugin.CorePluginLoader])
    # the spec's paths are relative: the working directory is root (make tensorboard's: the repo)
    board.configure(argv=["", "--logdir_spec", spec[1], "--reload_interval", "0"])
    board.flags.reload_task = "blocking"
    ingester = LocalDataIngester(board.flags)
    ingester.start()
    plugin_context = backend_context.Context(
        base_plugin.TBContext(data_provider=ingester.data_provider, flags=board.flags)
    )
    request = context.RequestContext()
    experiment = get_experiment.Handler(
        request, plugin_context, "", api_pb2.GetExperimentRequest()
    ).run()
    groups_request = api_pb2.ListSessionGroupsRequest(
        start_index=0,
        slice_size=100,
        allowed_statuses=[api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS],
    )
    groups = list_session_groups.Handler(request, plugin_context, "", groups_request).run()
    return experiment, groups


def test_combined_board_has_every_sweeps_swept_keys_as_hparams_columns(
    sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # make tensorboard's folders: the real PPO sweep (its jobs' tb/), a seed sweep and a run
    ppo = tmp_path / "multirun" / "2026-01-01" / "10-00-00"
    for num in range(4):
        shutil.copytree(sweep / str(num) / "tb", ppo / str(num) / "tb")
    for seed in (0, 1):
        hparams = {"seed": float(seed), "experiment": "seed_sweep", "train_type": "online_grpo"}
        tb_dir = tmp_path / "multirun" / "seed_sweep" / "2026-01-02_09-00-00" / str(seed) / "tb"
        _write_session(tb_dir / f"seed={seed}", hparams, 0.5 + seed / 4)
    _write_session(
        tmp_path / "outputs" / "2026-01-03" / "08-00-00" / "tb" / "x", {"seed": 0.0}, 0.1
    )
    monkeypatch.chdir(tmp_path)
    experiment, groups = _combined_board()
    columns = {info.name: info for info in experiment.hparam_infos}
    # every sweep's swept keys are columns, typed and marked as differing
    for key in ("train_type.ppo_gamma", "train_type.ppo_gae_lambda", "seed"):
        assert columns[key].type == api_pb2.DATA_TYPE_FLOAT64 and columns[key].differs, key
    assert columns["train_type.ppo_gamma"].domain_interval.min_value == 0.95
    assert columns["train_type.ppo_gamma"].domain_interval.max_value == 1.0
    assert set(columns["experiment"].domain_discrete) == {"ppo_sweep", "seed_sweep"}
    assert columns["trainer.progress_bar"].type == api_pb2.DATA_TYPE_BOOL
    assert "eval/accuracy" in {info.name.tag for info in experiment.metric_infos}
    # one row per run, with its own values and final accuracy
    rows = {group.name: group for group in groups.session_groups}
    assert len(rows) == 7
    for num, (gamma, lam) in enumerate(GRID):
        (name,) = [n for n in rows if n.startswith(f"multirun/2026-01-01/10-00-00/{num}/tb/")]
        assert rows[name].hparams["train_type.ppo_gamma"].number_value == gamma
        assert rows[name].hparams["train_type.ppo_gae_lambda"].number_value == lam
    seed_row = rows["multirun/seed_sweep/2026-01-02_09-00-00/1/tb/seed=1"]
    assert seed_row.hparams["seed"].number_value == 1.0
    (accuracy,) = [m.value for m in seed_row.metric_values if m.name.tag == "eval/accuracy"]
    assert accuracy == 0.75
