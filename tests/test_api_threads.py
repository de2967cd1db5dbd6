"""``astrai.fit`` and ``astrai.compose`` used the way libraries are (issue 59, item 10): from
several threads, with a wrong argument, with a plain OmegaConf config, into a run dir that is a
file. Calls from threads run one at a time (docs/api.md); every misuse is one exception that
says what was expected."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf
from tests.helpers import compose_config

import astrai
import astrai.train
from astrai.config.errors import ConfigError
from astrai.run_lock import RunDirBusy

JOB = ["debug=quick", "logger.tensorboard=false", "ckpt.every_steps=0"]
WAIT_S = 30  # the longest a held call waits for the test to let it go


def _in_thread(name: str, work: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """``work()`` started on a thread named ``name``; its result or exception lands in the
    returned dict under ``result`` or ``error``."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = work()
        except BaseException as err:  # noqa: BLE001 (handed to the test)
            out["error"] = err

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread, out


# --- Hydra's global state --------------------------------------------------------------------


def test_two_threads_compose_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread A is held inside Hydra's compose when thread B composes: B waits for A and both
    get their config (before: B raised "GlobalHydra is already initialized")."""
    import hydra

    real_compose = hydra.compose
    inside, release = threading.Event(), threading.Event()

    def held(*args: Any, **kwargs: Any) -> DictConfig:
        if threading.current_thread().name == "A":
            inside.set()
            release.wait(WAIT_S)
        return real_compose(*args, **kwargs)

    monkeypatch.setattr(hydra, "compose", held)
    a, out_a = _in_thread("A", lambda: astrai.compose(["trainer.total_steps=3"]))
    assert inside.wait(WAIT_S)
    b, out_b = _in_thread("B", lambda: astrai.compose(["trainer.total_steps=4"]))
    b.join(0.2)
    assert "error" not in out_b, out_b["error"]
    release.set()
    a.join(WAIT_S)
    b.join(WAIT_S)
    assert out_a["result"].trainer.total_steps == 3
    assert out_b["result"].trainer.total_steps == 4


# --- fit calls from several threads ----------------------------------------------------------


def test_fit_calls_run_one_at_a_time_and_a_shared_run_dir_is_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run itself held (``astrai.train.run`` stands in for the trainer: this test is about
    who may start): a second call into the same run dir raises ``RunDirBusy`` at once, one into
    another dir waits for the first to end, then runs (before: the second call's lock was a
    no-op, so two runs wrote one dir)."""
    cfg = astrai.compose(JOB)
    started: list[str] = []
    inside, release = threading.Event(), threading.Event()

    def held_run(config: DictConfig, run_dir: Path) -> dict[str, object]:
        started.append(Path(run_dir).name)
        if Path(run_dir).name == "first":
            inside.set()
            release.wait(WAIT_S)
        return {"step": 0, "run_dir": str(run_dir)}

    monkeypatch.setattr(astrai.train, "run", held_run)
    first, out_first = _in_thread("first", lambda: astrai.fit(cfg, run_dir=tmp_path / "first"))
    assert inside.wait(WAIT_S)
    with pytest.raises(RunDirBusy) as busy:
        astrai.fit(cfg, run_dir=tmp_path / "first")
    assert str(busy.value) == (
        f"run dir {tmp_path / 'first'} is in use by another astrai.fit call of this process "
        "(thread first): wait for that run to end, or choose another run_dir"
    )
    second, out_second = _in_thread("second", lambda: astrai.fit(cfg, run_dir=tmp_path / "second"))
    second.join(0.2)
    assert second.is_alive() and started == ["first"]  # waiting for the first run to end
    release.set()
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert started == ["first", "second"]
    assert out_first["result"]["step"] == out_second["result"]["step"] == 0
    # the claims are given back: the same dir again, from this thread
    assert astrai.fit(cfg, run_dir=tmp_path / "first")["step"] == 0


def test_default_run_dirs_of_calls_in_one_second_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call waiting for another gets its own default run dir, not the one it waits behind."""
    import datetime

    from astrai.api import default_run_dir

    monkeypatch.chdir(tmp_path)
    now = datetime.datetime(2026, 1, 2, 3, 4, 5)
    first = default_run_dir(now)
    assert first == Path("outputs/2026-01-02/03-04-05")
    assert default_run_dir(now, taken=[first.resolve()]) == Path("outputs/2026-01-02/03-04-05-1")


@pytest.mark.slow  # ~4 s: two real in-process runs
def test_two_threads_fit_into_two_run_dirs_and_both_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real runs: both finish, each with its own run dir, log and metrics, the same numbers as
    each other (one job, one seed: a run that shared the process's random streams with another
    running beside it would differ)."""
    monkeypatch.chdir(tmp_path)
    job = [*JOB, "trainer.total_steps=2"]
    threads = [
        _in_thread(name, lambda name=name: astrai.fit(job, run_dir=tmp_path / name))
        for name in ("a", "b")
    ]
    for thread, _ in threads:
        thread.join(120)
    summaries = []
    for (_, out), name in zip(threads, ("a", "b"), strict=True):
        assert "error" not in out, out.get("error")
        summaries.append(out["result"])
        assert json.loads((tmp_path / name / "summary.json").read_text())["step"] == 2
        log = (tmp_path / name / "train.log").read_text()
        assert f"run dir {tmp_path / name}" in log
        assert f"run dir {tmp_path / ('b' if name == 'a' else 'a')}" not in log
    timing = ("perf/", "time/", "wall_time_s", "checkpoint", "run_dir")
    same = [{k: v for k, v in s.items() if not k.startswith(timing)} for s in summaries]
    assert same[0] == same[1]


# --- what fit takes --------------------------------------------------------------------------


JOB_TYPES = (
    "fit takes a list of overrides (astrai.fit(['debug=quick'])) or a DictConfig: one from "
    "astrai.compose, or a plain OmegaConf config (OmegaConf.create(...), OmegaConf.load(...)) "
    "merged onto the defaults; got "
)


@pytest.mark.parametrize(
    ("job", "got"),
    [
        (42, "int 42"),  # before: "'int' object is not iterable"
        ({"trainer": {}}, "dict {'trainer': {}}"),  # before: Hydra's error about 'trainer'
        ("debug=quick", "str 'debug=quick'"),
        (["debug=quick", 3], "list ['debug=quick', 3]"),
    ],
)
def test_fit_says_what_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: object, got: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError) as caught:
        astrai.fit(job)  # type: ignore[arg-type]
    assert str(caught.value) == JOB_TYPES + got
    assert list(tmp_path.iterdir()) == []


def test_a_run_dir_that_is_a_file(tmp_path: Path) -> None:
    """Before: ``FileExistsError: [Errno 17] File exists`` from inside ``mkdir``."""
    file = tmp_path / "run"
    file.write_text("mine\n")
    with pytest.raises(NotADirectoryError) as caught:
        astrai.fit(JOB, run_dir=file)
    assert (caught.value.filename, caught.value.strerror) == (
        str(file),
        "not a directory (run_dir is a file)",
    )
    with pytest.raises(NotADirectoryError) as below:
        astrai.fit(JOB, run_dir=file / "sub")
    assert below.value.strerror == f"not a directory ({file} in run_dir's path is a file)"
    assert file.read_text() == "mine\n"
    with pytest.raises(TypeError, match=r"^run_dir is a path \(str or pathlib.Path\) or None"):
        astrai.fit(JOB, run_dir=42)  # type: ignore[arg-type]


# --- a plain OmegaConf config ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("plain", "message"),
    [
        (  # before: the key was accepted (no schema behind a plain config)
            {"trainer": {"total_step": 3}},
            "trainer.total_step is not a config key (did you mean trainer.total_steps?)",
        ),
        (
            {"trainer": {"total_steps": "ten"}},
            "trainer.total_steps: Value 'ten' of type 'str' could not be converted to Integer",
        ),
    ],
)
def test_a_plain_config_is_checked_against_the_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain: dict, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        astrai.fit(OmegaConf.create(plain))
    assert str(caught.value) == message
    assert list(tmp_path.iterdir()) == []


def test_a_plain_config_keeps_the_defaults_it_does_not_set() -> None:
    from astrai.api import job_config

    cfg = job_config(OmegaConf.create({"trainer": {"total_steps": 7}, "seed": 3}))
    default = compose_config([])  # the defaults (one composition, shared with other tests)
    assert (cfg.trainer.total_steps, cfg.seed) == (7, 3)
    assert cfg.trainer.eval_every == default.trainer.eval_every
    assert OmegaConf.to_container(cfg.train_type) == OmegaConf.to_container(default.train_type)


@pytest.mark.slow  # ~1 s: three composes
def test_a_runs_saved_config_comes_back_as_the_config_it_ran() -> None:
    """``OmegaConf.load(<run>/config.yaml)`` of a PPO job with W&B on another task: its group
    options are found from its nodes (``_target_``, ``name``) and the config is the same."""
    from astrai.api import job_config
    from astrai.config.plain_config import group_overrides

    overrides = [
        "train_type=online_ppo",
        "task=reverse",
        "logger=[tensorboard,wandb]",
        "logger.wandb.mode=offline",
        "trainer.total_steps=3",
    ]
    composed = astrai.compose(overrides)
    saved = OmegaConf.create(OmegaConf.to_yaml(composed, resolve=True))
    assert group_overrides(saved) == [
        "train_type=online_ppo",
        "critic=value_model",
        "task=reverse",
        "logger=[tensorboard,wandb]",
    ]
    again = job_config(saved)  # validated: the lag plan recorded, as fit records it
    assert OmegaConf.to_container(again, resolve=True) == OmegaConf.to_container(
        job_config(composed), resolve=True
    )
    assert composed.engine.old_logprobs == "auto"  # fit validated a copy of the caller's
