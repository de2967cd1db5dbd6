"""A new engine is its module and its YAML (issue 47): ``tests/engine/toy_engine.py`` is
registered by ``_target_`` from a config directory of the test's own, joined to Hydra's search
path, and ``python train.py`` trains with it, touching no file of ``src/`` or ``conf/``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.engine.toy_engine import ToyEngine
from tests.helpers import compose_config
from tests.train_runs import QUICK, run_train_in_process

from astrai.config.errors import ConfigError
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.engines.engine import build_engine

TOY_YAML = """\
# a toy engine outside conf/: its class, astrai's keys of every engine node, its own knob
_target_: tests.engine.toy_engine.ToyEngine
old_logprobs: recompute     # the trainer scores the sampled tokens again: the mismatch is logged
correction: token_truncate
correction_low: null
correction_high: null
calls: {calls}              # the toy's own knob: where it records its calls
"""


def _toy_run(tmp_path: Path, *overrides: str) -> tuple[list[dict[str, float]], list[str]]:
    conf = tmp_path / "myconf"
    (conf / "engine").mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    (conf / "engine" / "toy.yaml").write_text(TOY_YAML.format(calls=calls))
    args = [
        *QUICK,
        f"hydra.searchpath=[file://{conf}]",
        "engine=toy",
        f"hydra.run.dir={tmp_path / 'run'}",
        "logger.tensorboard=false",
        "ckpt.every_steps=0",
        *overrides,
    ]
    result = run_train_in_process(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    return rows, calls.read_text().splitlines()


def test_a_toy_engine_from_a_test_module_trains_two_steps(tmp_path: Path) -> None:
    rows, calls = _toy_run(tmp_path)
    steps = [row for row in rows if "loss/policy" in row]
    assert [row["step"] for row in steps] == [1, 2]
    # every rollout (4 prompts x 2) and every evaluation (8 greedy prompts) went through it,
    # and it took the updated weights after each of the 2 updates
    assert calls.count("sample 4x2") == 2 and calls.count("sync") == 2
    assert calls.count("sample 8x1") == 3  # evaluations at steps 0, 1, 2
    # its own copy follows the policy: step 2 was sampled from the weights synced after step 1,
    # so the trainer's recomputed π_old agrees with the toy's logprobs (a stale copy would not)
    for row in steps:
        assert 0 <= row["perf/weight_sync_s"] < 5
        assert row["rollout/logprob_diff_max"] < 1e-5, row["step"]


def test_a_key_the_toy_engine_does_not_have_is_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "myconf"
    (conf / "engine").mkdir(parents=True)
    (conf / "engine" / "toy.yaml").write_text(TOY_YAML.format(calls="''") + "temprature: 0.5\n")
    with pytest.raises(ConfigError, match=r"^engine.temprature is not a key of engine=toy \(its"):
        compose_config([*QUICK, f"hydra.searchpath=[file://{conf}]", "engine=toy"])
    (conf / "engine" / "toy.yaml").write_text(TOY_YAML.format(calls="[1]"))
    with pytest.raises(ConfigError, match=r"^engine.calls: Cannot convert .ListConfig. to string"):
        compose_config([*QUICK, f"hydra.searchpath=[file://{conf}]", "engine=toy"])


def test_the_toy_engine_is_also_chosen_by_target_alone() -> None:
    cfg = compose_config([*QUICK, "engine._target_=tests.engine.toy_engine.ToyEngine"])
    policy = LlamaForCausalLM(LlamaConfig())
    engine = build_engine(cfg.engine, policy, CharTokenizer(), cfg.infra.precision)
    assert isinstance(engine, ToyEngine) and engine.calls is None  # its knob's default
    assert not engine.samples_live_policy and engine.on(policy) is engine
