"""HParams record and custom-scalars layout: what a run writes into its own event files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import api_pb2, metadata
from tests.helpers import compose_config

from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.ppo import PPOStrategy
from astrai.metrics.dashboards import (
    LAYOUT_CHARTS,
    hparam_value,
    hparams_start_summary,
    layout_charts,
    layout_summary,
    run_hparams,
    run_name,
    swept_keys,
)
from astrai.metrics.names import METRICS, OPTION_METRICS
from astrai.metrics.writers import RunLogger
from astrai.training.run import Run

# final metrics a sweep compares: the HParams tab shows each scalar's last value
FINAL_METRICS = (
    "eval/accuracy",
    "rollout/reward_mean",
    "value/explained_variance",
    "time/elapsed_s",
)

PPO_QUICK = [
    "train_type=online_ppo",
    "debug=quick",  # conf/debug/quick.yaml; the lines below differ from it
    "trainer.total_steps=4",
    "trainer.eval_every=2",
    "train_type.minibatches=1",
    "train_type.ppo_epochs=1",
    "logger.samples_every=2",
    "logger.num_samples=3",
    "ckpt.every_steps=0",
]


def _events(run_dir: Path) -> EventAccumulator:
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    return events


def _plugin_data(events: EventAccumulator, tag: str) -> bytes:
    return events.SummaryMetadata(tag).plugin_data.content


# --- the hparams definition --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (3, 3.0), (0.95, 0.95), ("k3", "k3"), (None, "null"), ([1, 2], "[1, 2]")],
)
def test_hparam_values_are_typed_as_tensorboard_requires(value: object, expected: object) -> None:
    result = hparam_value(value)
    assert result == expected
    assert type(result) is type(expected)


def test_hparams_are_the_job_overrides_plus_key_knobs() -> None:
    overrides = [
        "train_type=online_ppo",
        "train_type.ppo_gamma=0.95",
        "+train_type.optimizer.betas=[0.9,0.95]",
        "trainer.progress_bar=false",
        "~ckpt.resume",
        "hydra.run.dir=/tmp/x",
    ]
    cfg = compose_config(
        ["train_type=online_ppo", "train_type.ppo_gamma=0.95", "trainer.progress_bar=false"]
    )
    choices = {"train_type": "online_ppo", "model": "tiny", "task": "addition", "hydra/x": "y"}
    hparams = run_hparams(cfg, overrides, choices)
    # overrides: typed values from the config; a group override keeps the option's name
    assert hparams["train_type"] == "online_ppo"
    assert hparams["train_type.ppo_gamma"] == 0.95
    assert hparams["train_type.optimizer.betas"] == "[0.9, 0.99]"  # from the composed config
    assert hparams["trainer.progress_bar"] is False
    assert "ckpt.resume" not in hparams and "hydra.run.dir" not in hparams
    # a few core knobs, whether overridden or not; no others
    assert hparams["seed"] == 0.0
    assert hparams["train_type.optimizer.lr"] == 1e-3
    assert hparams["model"] == "tiny" and hparams["task"] == "addition"
    assert "train_type.ppo_gae_lambda" not in hparams and "critic" not in hparams
    assert all(isinstance(v, bool | float | str) for v in hparams.values())
    assert hparams.swept == ()  # not a sweep: nothing marked as varying


def test_grpo_runs_have_no_ppo_knobs() -> None:
    hparams = run_hparams(compose_config([]))
    assert "train_type.ppo_gamma" not in hparams
    assert list(hparams) == ["seed", "trainer.total_steps", "train_type.optimizer.lr"]


# what Hydra gives a job of `train.py -m +experiment=ppo_sweep train_type.ppo_gamma=0.95,1.0
# infra.mounts.data=/d trainer.total_steps=3`: the preset's grid, the command line (multirun.yaml)
SWEEP_DEFINITION = [
    "train_type.ppo_gamma=0.95,0.99,1.0",  # hydra.sweeper.params
    "train_type.ppo_gae_lambda=0.9,0.95",
    "+experiment=ppo_sweep",  # hydra.overrides.task of multirun.yaml
    "train_type.ppo_gamma=0.95,1.0",
    "infra.mounts.data=/d1,/d2",  # a path: never a column, even when swept
    "trainer.total_steps=3",
    "hydra.sweep.dir=multirun/x",
]
JOB_OVERRIDES = [
    "+experiment=ppo_sweep",
    "infra.mounts.data=/d1",
    "trainer.total_steps=3",
    "train_type.ppo_gamma=1.0",
    "train_type.ppo_gae_lambda=0.9",
]
JOB_CHOICES = {"train_type": "online_ppo", "model": "tiny", "task": "addition", "experiment": "x"}


def test_swept_keys_come_from_the_sweep_definition_not_from_every_override() -> None:
    swept = swept_keys(JOB_OVERRIDES, SWEEP_DEFINITION)
    assert swept == ["train_type.ppo_gamma", "train_type.ppo_gae_lambda"]
    # unknown definition (no multirun.yaml, no grid): every recorded override of the job
    assert swept_keys(JOB_OVERRIDES, []) == [
        "experiment",
        "trainer.total_steps",
        "train_type.ppo_gamma",
        "train_type.ppo_gae_lambda",
    ]
    assert swept_keys(["seed=1"], ["seed=range(0,3)"]) == ["seed"]
    assert swept_keys(["a.lr=0.1"], ["a.lr=interval(0.0,1.0)"]) == ["a.lr"]  # Optuna's


def test_swept_keys_are_recorded_first_then_overrides_then_core_knobs() -> None:
    cfg = compose_config(["train_type=online_ppo", *JOB_OVERRIDES[2:]])
    swept = swept_keys(JOB_OVERRIDES, SWEEP_DEFINITION)
    hparams = run_hparams(cfg, JOB_OVERRIDES, JOB_CHOICES, swept)
    assert hparams.swept == ("train_type.ppo_gamma", "train_type.ppo_gae_lambda")
    assert list(hparams) == [
        "train_type.ppo_gamma",  # what the sweep varies, in the job's order
        "train_type.ppo_gae_lambda",
        "experiment",  # the job's other overrides
        "trainer.total_steps",
        "train_type",  # then a few core knobs
        "model",
        "task",
        "seed",
        "train_type.optimizer.lr",
    ]


def test_run_name_carries_the_swept_overrides_and_is_a_safe_folder_name() -> None:
    swept = swept_keys(JOB_OVERRIDES, SWEEP_DEFINITION)
    assert run_name(JOB_OVERRIDES, swept) == "ppo_gamma=1.0,ppo_gae_lambda=0.9"
    assert run_name(JOB_OVERRIDES, []) is None  # a single run keeps tb/
    # same last component: the shortest unambiguous end; odd characters become "_"
    overrides = ["a.lr=0.1", "b.lr=0.2", "model=hf/x y", "tag=../up"]
    swept = ["a.lr", "b.lr", "model", "tag"]
    assert run_name(overrides, swept) == "a.lr=0.1,b.lr=0.2,model=hf_x_y,tag=.._up"
    assert run_name(["tag=../x"], ["tag"]) == "tag=.._x"
    assert run_name(["s=" + "9" * 300], ["s"]) == "s=" + "9" * 118


def test_start_summary_parses_back_with_the_plugins_own_reader() -> None:
    hparams = {"train_type.ppo_gamma": 0.99, "train_type": "online_ppo", "flag": True}
    start_pb = hparams_start_summary(hparams, 123.0)
    # the session start only: an experiment record would fix the columns of a combined board
    assert [v.tag for v in start_pb.value] == [metadata.SESSION_START_INFO_TAG]
    start = metadata.parse_session_start_info_plugin_data(
        start_pb.value[0].metadata.plugin_data.content
    )
    assert start.hparams["train_type.ppo_gamma"].number_value == 0.99
    assert start.hparams["train_type"].string_value == "online_ppo"
    assert start.hparams["flag"].bool_value is True
    assert start.start_time_secs == 123.0


def test_layout_groups_related_charts_from_documented_metrics_only() -> None:
    for tags in LAYOUT_CHARTS.values():
        assert set(tags) <= set(METRICS) | set(OPTION_METRICS)
    assert set(FINAL_METRICS) <= set(METRICS)
    grpo = layout_charts(GRPOStrategy.metric_names)
    assert "value: loss, explained variance" not in grpo  # GRPO has no critic: no empty chart
    assert len(grpo) == 3
    assert grpo["KL to reference: k1, k2, k3"] == ["kl/k1", "kl/k2", "kl/k3"]
    assert layout_charts(["kl/k2"]) == {"KL to reference: k1, k2, k3": ["kl/k2"]}


def _layout(summary: Summary) -> layout_pb2.Layout:
    layout = layout_pb2.Layout()
    layout.ParseFromString(summary.value[0].tensor.string_val[0])
    return layout


def test_layout_summary_matches_tags_exactly() -> None:
    layout = _layout(layout_summary(PPOStrategy.metric_names))
    (category,) = layout.category
    charts = {chart.title: list(chart.multiline.tag) for chart in category.chart}
    assert charts["policy: loss, clipfrac, approx KL"] == [
        "^loss/policy$",
        "^policy/clipfrac$",
        "^policy/approx_kl$",
    ]
    assert charts["value: loss, explained variance"] == [
        "^loss/value$",
        "^value/explained_variance$",
    ]


# --- what a run writes -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("ppo")
    summary = Run(compose_config(PPO_QUICK), run_dir).fit()
    return run_dir, summary


def test_run_writes_hparams_and_layout_into_its_own_run(ppo_run) -> None:  # noqa: ANN001
    run_dir, summary = ppo_run
    assert [p.is_file() for p in (run_dir / "tb").iterdir()] == [True]  # one file, no sub-runs
    events = _events(run_dir)
    start = metadata.parse_session_start_info_plugin_data(
        _plugin_data(events, metadata.SESSION_START_INFO_TAG)
    )
    assert start.hparams["trainer.total_steps"].number_value == 4.0  # a core knob
    assert start.hparams["train_type.optimizer.lr"].number_value == pytest.approx(1e-3)
    assert metadata.EXPERIMENT_TAG not in events.Tags()["tensors"]  # docs/sweeps.md
    end = metadata.parse_session_end_info_plugin_data(
        _plugin_data(events, metadata.SESSION_END_INFO_TAG)
    )
    assert end.status == api_pb2.STATUS_SUCCESS
    # the HParams tab shows each metric's last scalar: the run's final values
    for tag in FINAL_METRICS:
        assert events.Scalars(tag)[-1].step == 4
        assert events.Scalars(tag)[-1].value == pytest.approx(summary[tag], abs=1e-6)
    assert "custom_scalars__config__" in events.Tags()["tensors"]


def test_elapsed_time_grows_every_step_and_ends_in_the_summary(ppo_run) -> None:  # noqa: ANN001
    run_dir, summary = ppo_run
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    elapsed = [r["time/elapsed_s"] for r in rows if "time/elapsed_s" in r]
    assert len(elapsed) == 4 and all(b > a > 0 for a, b in zip(elapsed, elapsed[1:], strict=False))
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["time/elapsed_s"] == elapsed[-1]
    assert saved["time/elapsed_s"] <= saved["wall_time_s"]


def test_sample_completions_are_a_text_table_every_n_steps(ppo_run) -> None:  # noqa: ANN001
    run_dir, _ = ppo_run
    events = _events(run_dir)
    rollout = events.Tensors("samples/rollout/text_summary")
    assert [e.step for e in rollout] == [2, 4]  # logger.samples_every=2
    table = rollout[-1].tensor_proto.string_val[0].decode()
    lines = table.splitlines()
    assert lines[:2] == ["| prompt | response | reward |", "|---|---|---|"]
    assert len(lines) == 2 + 3  # logger.num_samples=3 rows
    assert all(line.startswith("| `") and line.count(" | ") == 2 for line in lines[2:])
    # greedy answers to held-out prompts at every evaluation
    assert [e.step for e in events.Tensors("samples/eval/text_summary")] == [0, 2, 4]


def test_resumed_run_keeps_one_hparams_record_and_counts_time_on(tmp_path: Path) -> None:
    Run(compose_config(PPO_QUICK), tmp_path).fit(until=2)  # checkpoint at step 2
    first = json.loads((tmp_path / "summary.json").read_text())
    assert first["step"] == 2
    events = _events(tmp_path)
    assert metadata.SESSION_END_INFO_TAG not in events.Tags()["tensors"]  # not complete yet
    hparams_tags = events.PluginTagToContent(metadata.PLUGIN_NAME)  # tensor or not
    assert metadata.SESSION_START_INFO_TAG in hparams_tags
    assert metadata.SESSION_END_INFO_TAG not in hparams_tags
    # a resume is a later process whose event file sorts after the first's; in one test process
    # the files' per-process counter runs on across tests (".9" sorts after ".10"), so the
    # second file must not share the first's second (as in the test below)
    time.sleep(1.1)
    Run(compose_config(PPO_QUICK), tmp_path).fit()  # ckpt.resume=auto
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    elapsed = {r["step"]: r["time/elapsed_s"] for r in rows if "time/elapsed_s" in r}
    assert sorted(elapsed) == [1, 2, 3, 4]
    assert elapsed[3] > elapsed[2] == first["time/elapsed_s"]  # counted on from the checkpoint
    events = _events(tmp_path)
    assert [p.is_file() for p in (tmp_path / "tb").iterdir()] == [True, True]  # no sub-runs
    end = metadata.parse_session_end_info_plugin_data(
        _plugin_data(events, metadata.SESSION_END_INFO_TAG)
    )
    assert end.status == api_pb2.STATUS_SUCCESS
    assert [e.step for e in events.Scalars("eval/accuracy")] == [0, 2, 4]


def test_named_tensorboard_run_resumes_into_one_record(tmp_path: Path) -> None:
    run = "ppo_gamma=0.95,ppo_gae_lambda=0.9"
    first = RunLogger(tmp_path, tb_run=run, flush_secs=1)
    for step in range(5):  # steps 3 and 4 come after the checkpoint at step 2
        first.log(step, {"loss/policy": float(step)})
    first.close()
    # a resume is a later process: its event file's name (time, host, pid, a per-process
    # counter) sorts after the first's. In one test process the counter runs on across tests
    # (".9" sorts after ".10"), so the second file must not share the first's second
    time.sleep(1.1)
    # resumed from step 2 under whatever name: the same run, purged after the checkpoint
    second = RunLogger(tmp_path, tb_run="another", resume_step=2, flush_secs=1)
    assert second.tb_dir == tmp_path / "tb" / run
    second.log(3, {"loss/policy": 30.0})
    second.close()
    assert [p.name for p in (tmp_path / "tb").iterdir()] == [run]
    events = EventAccumulator(str(tmp_path / "tb" / run))
    events.Reload()
    values = [(e.step, e.value) for e in events.Scalars("loss/policy")]
    assert values == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 30.0)]
    single = RunLogger(tmp_path / "single", flush_secs=1)  # outside a sweep: tb/ itself
    assert single.tb_dir == tmp_path / "single" / "tb"
    single.close()
