"""A new collector is its module and its YAML (issue 60): ``tests/rollout/toy_collector.py`` is
chosen by ``_target_`` from a config directory of the test's own, joined to Hydra's search path,
and ``python train.py`` trains and evaluates through it, touching no file of ``src/`` or
``conf/``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers import compose_config
from tests.train_runs import QUICK, run_train_in_process

from astrai.config.errors import ConfigError

TOY_YAML = """\
# a toy collector outside conf/: its class and its own key
_target_: tests.rollout.toy_collector.RecordingCollector
calls: {calls}              # the toy's own key: where it records its calls
"""


def _searchpath(tmp_path: Path, yaml: str) -> str:
    conf = tmp_path / "myconf"
    (conf / "collector").mkdir(parents=True, exist_ok=True)
    (conf / "collector" / "toy.yaml").write_text(yaml)
    return f"hydra.searchpath=[file://{conf}]"


def test_a_toy_collector_from_a_test_module_collects_every_rollout_and_evaluation(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.txt"
    args = [
        *QUICK,
        _searchpath(tmp_path, TOY_YAML.format(calls=calls)),
        "collector=toy",
        f"hydra.run.dir={tmp_path / 'run'}",
        "logger.tensorboard=false",
        "ckpt.every_steps=0",
    ]
    result = run_train_in_process(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    # both rollouts (4 prompts x 2: the initial policy's, then the one after step 1's
    # optimizer steps) and the three evaluations (steps 0, 1, 2: 8 greedy prompts each) went
    # through it, in the loop's order
    lines = calls.read_text().splitlines()
    assert lines[:3] == ["evaluate 8", "collect 4x2 v0", "evaluate 8"]
    assert lines[3].startswith("collect 4x2 v") and int(lines[3].rpartition("v")[2]) > 0
    assert lines[4:] == ["evaluate 8"]
    evals = [row for row in rows if "eval/accuracy" in row]
    assert [row["step"] for row in evals] == [0, 1, 2]
    # its grades, not the reward's: a random tiny policy answers none of them right
    assert all(row["eval/accuracy"] == 1.0 and row["eval/reward_mean"] == 1.0 for row in evals)
    assert [row["step"] for row in rows if "loss/policy" in row] == [1, 2]
    log = (tmp_path / "run" / "train.log").read_text()
    assert "  collector: the toy, every held-out answer graded correct" in log


def test_a_key_the_toy_collector_does_not_take_is_one_line(tmp_path: Path) -> None:
    path = _searchpath(tmp_path, TOY_YAML.format(calls="''") + "cals: x\n")
    message = (
        r"^collector.cals is not a key of tests.rollout.toy_collector.RecordingCollector "
        r"\(its keys: _target_, calls\)$"
    )
    with pytest.raises(ConfigError, match=message):
        compose_config([*QUICK, path, "collector=toy"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["collector._target_=astrai.rollout.collectors.Nope"], r"^collector._target_ 'astrai."
         r"rollout.collectors.Nope': module 'astrai.rollout.collectors' has no 'Nope'$"),
        (["collector._target_=astrai.rollout.rollout.Rollout"], r"^collector._target_ 'astrai."
         r"rollout.rollout.Rollout' is not a collector \(a subclass of astrai.rollout."
         r"collectors.Collector; select one with collector=<name>\)$"),
        (["collector=episodes"], r"^collector._target_='astrai.rollout.collectors."
         r"EpisodeCollector' plays an environment's episodes: choose one"),
        (["collector=single_turn", "experiment=calculator"], r"^collector._target_='astrai."
         r"rollout.collectors.SingleTurnCollector' plays no environment's episodes, and env="
         r"astrai.envs.calculator.Calculator is set"),
    ],
)  # fmt: skip
def test_a_collector_that_does_not_fit_the_run_is_one_line(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        compose_config([*QUICK, *overrides])


def test_auto_is_the_collector_that_fits_the_env() -> None:
    from astrai.config.collector_checks import configured_collector
    from astrai.config.env_checks import configured_env
    from astrai.rollout.collectors import EpisodeCollector, SingleTurnCollector

    for overrides, expected in (([], SingleTurnCollector), (["experiment=calculator"],
                                                           EpisodeCollector)):  # fmt: skip
        cfg = compose_config([*QUICK, *overrides], validate=False)
        assert cfg.collector._target_ is None  # collector=auto
        assert configured_collector(cfg.collector, configured_env(cfg.env)) is expected
