"""The Python API (``astrai.compose``, ``astrai.fit``): the command line's job, called from code.

The same job through both doors writes the same metrics; a bad config is one ``ConfigError``
and leaves nothing behind; ``import astrai`` stays light.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import astrai
from astrai.config.errors import ConfigError
from astrai.run_lock import RunDirBusy, lock_run_dir, release_run_dir

JOB = ["debug=quick", "logger.tensorboard=false", "ckpt.every_steps=0"]


@pytest.mark.slow  # ~4 s: two in-process runs (the fast suite is at its budget)
def test_fit_returns_the_summary_it_writes_and_resumes_from_its_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = astrai.compose(JOB)
    cfg.trainer.total_steps = 1  # a config edited in code
    summary = astrai.fit(cfg, run_dir="run")
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["step"] == written["step"] == 1
    assert summary["eval/accuracy"] == written["eval/accuracy"]
    # addition: 100 prompts split 87 / 13 (tasks/arithmetic.py), debug=quick evaluates 8
    assert (written["train_prompts"], written["eval_prompts"]) == (87, 13)
    assert written["evaluated_prompts"] == 8 and written["prompt_counts_exact"] is True
    assert "astrai: online_grpo on addition" in (tmp_path / "run" / "train.log").read_text()
    # the same dir again, with overrides this time: it resumes the checkpoint at step 1
    again = astrai.fit([*JOB, "trainer.total_steps=2"], run_dir=tmp_path / "run")
    assert again["step"] == 2
    steps = [json.loads(line)["step"] for line in (tmp_path / "run/metrics.jsonl").open()]
    assert steps == [0, 1, 2]
    assert "resumed from" in (tmp_path / "run" / "train.log").read_text()


def test_a_bad_config_is_one_error_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^trainer\.total_step is not a config key"):
        astrai.fit(["trainer.total_step=3"])
    cfg = astrai.compose(JOB)
    cfg.train_type.group_size = 0  # edited in code: validated before anything is written
    with pytest.raises(ConfigError, match="train_type.group_size"):
        astrai.fit(cfg, run_dir="run")
    with pytest.raises(TypeError, match="list of strings"):
        astrai.compose("debug=quick")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_fit_refuses_a_run_dir_another_run_holds(tmp_path: Path) -> None:
    run_dir = tmp_path / "busy"
    held = subprocess.Popen(  # another process holds the dir's lock
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from astrai.run_lock import "
            "lock_run_dir; lock_run_dir(Path(sys.argv[1])); print('held', flush=True); "
            "time.sleep(60)",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert held.stdout is not None and held.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy, match=f"pid {held.pid}"):
            astrai.fit(JOB, run_dir=run_dir)
    finally:
        held.kill()
        held.wait()


def test_the_lock_is_given_back_after_the_run(tmp_path: Path) -> None:
    lock_run_dir(tmp_path / "a")
    release_run_dir(tmp_path / "a")
    release_run_dir(tmp_path / "a")  # not held: nothing to do
    done = subprocess.run(  # another process can take it now
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from astrai.run_lock "
            "import lock_run_dir; lock_run_dir(Path(sys.argv[1]))",
            str(tmp_path / "a"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_import_astrai_is_light_and_names_its_api() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, astrai; print('torch' in sys.modules, sorted(astrai.__all__), "
            "callable(astrai.fit))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["False", "['compose',", "'fit']", "True"], done.stderr
    with pytest.raises(AttributeError, match="no attribute 'train_model'"):
        astrai.train_model  # noqa: B018


def test_a_users_own_config_dir_joins_the_search_path(tmp_path: Path) -> None:
    """``hydra.searchpath=[file://DIR]``: a user's presets beside astrai's (docs/api.md)."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nseed: 7\ntrain_type:\n  group_size: 4\n"
    )
    cfg = astrai.compose([f"hydra.searchpath=[file://{tmp_path}]", "experiment=mine"])
    assert (cfg.seed, cfg.train_type.group_size) == (7, 4)
    with pytest.raises(ConfigError, match="experiment=mine is not an option"):
        astrai.compose(["experiment=mine"])  # without it: astrai's own presets only
