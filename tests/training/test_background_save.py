"""Checkpoints written in the background (``ckpt.background``, ``training.background_save``):
the same bytes as a save made at once, the state as it was at the save whatever training does
meanwhile, a failed write raised at the next wait, and a stop that waits for the write."""

from __future__ import annotations

import copy
import dataclasses
import errno
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config
from tests.train_runs import LAG_1

from astrai.checkpoints import io
from astrai.checkpoints.completeness import checkpoint_problems
from astrai.cli_errors import error_line
from astrai.models.weights import stored_names
from astrai.training.background_save import CheckpointWrites
from astrai.training.checkpointing import settled_state
from astrai.training.run import Run

QUICK = ["debug=quick", "ckpt.every_steps=0", *ALTERNATING]
HOLD_S = 60  # a held write waits at most this long for the test to let it go


def _trainer(run_dir: Path, *extra: str) -> Run:
    return Run(compose_config([*QUICK, *extra]), run_dir)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_a_background_save_writes_the_bytes_a_save_at_once_writes(tmp_path: Path) -> None:
    """The same state saved both ways into two run dirs: every file byte for byte, the PPO
    critic's files and a lag run's in-flight rollout included."""
    trainer = _trainer(tmp_path / "run", "train_type=online_ppo", *LAG_1)
    trainer.train_step()  # step 1; the sampling thread holds step 2's rollout
    assert trainer.started.rollouts.pipeline is not None
    state = settled_state(
        trainer.started.state,
        trainer.started.rollouts.pipeline.settle(),
        trainer.started.rollouts.pipeline.stream,
    )
    assert state.in_flight  # in_flight.pt is written
    parts = trainer.parts.checkpointed_objects(
        trainer.started.scheduler, trainer.started.critic_scheduler
    )
    writes = CheckpointWrites()
    writes.save(dataclasses.replace(parts, run_dir=tmp_path / "at_once"), state, background=False)
    path = writes.save(
        dataclasses.replace(parts, run_dir=tmp_path / "background"), state, background=True
    )
    writes.wait()
    trainer.close()
    at_once = _files(tmp_path / "at_once" / "checkpoints")
    background = _files(tmp_path / "background" / "checkpoints")
    assert path == tmp_path / "background" / "checkpoints" / "step_1"
    assert {"step_1/in_flight.pt", "step_1/value_model.pt", "reference.safetensors"} <= set(at_once)
    assert background.keys() == at_once.keys()
    assert [name for name in at_once if background[name] != at_once[name]] == []


def _state_now(trainer: Run) -> dict[str, Any]:
    """What a checkpoint of ``trainer`` holds now, copied."""
    assert trainer.parts.critic is not None and trainer.parts.critic_optimizer is not None
    assert trainer.started.critic_scheduler is not None
    policy = trainer.parts.policy.state_dict()
    return copy.deepcopy(
        {
            "model.safetensors": {k: policy[k] for k in stored_names(trainer.parts.reference)},
            "optimizer.pt": trainer.parts.optimizer.state_dict(),
            "scheduler.pt": trainer.started.scheduler.state_dict(),
            "value_model.pt": trainer.parts.critic.state_dict(),
            "value_optimizer.pt": trainer.parts.critic_optimizer.state_dict(),
            "value_scheduler.pt": trainer.started.critic_scheduler.state_dict(),
            "sample_stream": trainer.started.state.generators["sample"].get_state(),
        }
    )


def _same(a: Any, b: Any) -> bool:
    """Bitwise equality of nested state dicts."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _hold_writes(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """``io.write_checkpoint`` held until the returned ``release`` is set; ``started`` is set
    when a write begins (on the writer thread)."""
    started, release = threading.Event(), threading.Event()
    write = io.write_checkpoint

    def held(*args: Any, **kwargs: Any) -> Path:
        started.set()
        assert release.wait(HOLD_S), "the test never let the write go"
        return write(*args, **kwargs)

    monkeypatch.setattr(io, "write_checkpoint", held)
    return started, release


def test_a_background_save_writes_the_state_at_the_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write is held until another training step has changed the weights, both optimizers,
    both schedules and the random streams in place: the files hold the values of the save."""
    trainer = _trainer(tmp_path, "train_type=online_ppo")
    trainer.train_step()
    saved = _state_now(trainer)
    started, release = _hold_writes(monkeypatch)
    path = trainer.save_checkpoint(background=True)
    assert started.wait(HOLD_S) and not path.exists()  # the write is in flight, held
    trainer.train_step()  # step 2, while step 1's write waits
    release.set()
    trainer.wait_for_checkpoint()
    assert checkpoint_problems(path) == []
    after = _state_now(trainer)
    # every part moved in place (an alias of the live tensors would have been written so)
    assert [name for name in saved if _same(saved[name], after[name])] == []
    written = {
        name: load_file(path / name)
        if name.endswith(".safetensors")
        else io.load_torch(path / name)
        for name in saved
        if name != "sample_stream"
    }
    assert [name for name in written if not _same(written[name], saved[name])] == []
    record = json.loads((path / "trainer_state.json").read_text())
    assert (
        record["step"] == 1
        and record["policy_version"] == trainer.trainer.optimizer_steps_per_step()
    )
    trainer.close()


def test_a_background_save_returns_before_the_files_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only one write in flight: the next save waits for it (and a save at once does not
    return before its files are there)."""
    trainer = _trainer(tmp_path)
    trainer.train_step()
    started, release = _hold_writes(monkeypatch)
    first = trainer.save_checkpoint(background=True)
    assert started.wait(HOLD_S)
    trainer.train_step()
    threading.Timer(0.3, release.set).start()
    t0 = time.perf_counter()
    second = trainer.save_checkpoint()  # waits for step 1's write, then writes step 2
    assert time.perf_counter() - t0 >= 0.25
    assert checkpoint_problems(first) == [] and checkpoint_problems(second) == []
    trainer.close()


def _no_space(payload: object, path: Path) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")  # a write's: no file name


def _same_line(line: str) -> str:
    """``line`` with the temporary's unique suffix (pid, random) left out."""
    return re.sub(r"\.tmp-[0-9a-f-]+", ".tmp-X", line)


def test_a_failed_background_write_is_raised_at_the_next_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = _trainer(tmp_path)
    trainer.train_step()
    monkeypatch.setattr(io, "save_torch", _no_space)
    with pytest.raises(OSError) as at_once:
        trainer.save_checkpoint()
    path = trainer.save_checkpoint(background=True)  # the failure comes later
    with pytest.raises(OSError) as background:
        trainer.wait_for_checkpoint()
    line = error_line(background.value)
    assert _same_line(line) == _same_line(error_line(at_once.value))
    # the checkpoint's final name, not its temporary's (removed by then)
    assert (
        line == f"{tmp_path / 'checkpoints' / 'step_1' / 'optimizer.pt'}: No space left on device"
    )
    # nothing half-written: no step_1, no temporary
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["reference.safetensors"]
    trainer.wait_for_checkpoint()  # raised once
    monkeypatch.undo()
    assert trainer.save_checkpoint(background=True) == path
    trainer.wait_for_checkpoint()
    assert checkpoint_problems(path) == []
    trainer.close()


def test_a_failed_background_write_ends_the_run_at_the_next_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 1's write fails on its thread: step 2's save raises it, no summary is written."""

    def no_space_at_step_1(payload: object, path: Path) -> None:
        if path.parent.name.startswith(".step_1."):
            _no_space(payload, path)
        torch.save(payload, path)

    trainer = _trainer(tmp_path, "trainer.total_steps=3", "ckpt.every_steps=1")
    monkeypatch.setattr(io, "save_torch", no_space_at_step_1)
    with pytest.raises(OSError, match="No space left on device"):
        trainer.fit()
    trainer.close()
    assert trainer.started.state.step == 2  # raised by step 2's save, before it wrote anything
    assert not (tmp_path / "summary.json").exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["reference.safetensors"]


def test_a_stop_waits_for_the_checkpoint_written_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM right after step 2's save returned (its write still going): the run ends with
    exit status 0's summary naming step_2, complete on disk before ``fit`` returns."""
    write = io.write_checkpoint

    def slow_write(*args: Any, **kwargs: Any) -> Path:
        time.sleep(0.5)
        return write(*args, **kwargs)

    monkeypatch.setattr(io, "write_checkpoint", slow_write)
    trainer = _trainer(tmp_path, "trainer.total_steps=4", "ckpt.every_steps=1")
    save = trainer.save_checkpoint

    def save_then_signal(background: bool = False) -> Path:
        path = save(background)
        if trainer.started.state.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the stop handler's flag; read after the save
        return path

    trainer.save_checkpoint = save_then_signal  # type: ignore[method-assign]
    summary = trainer.fit()
    assert summary["stopped"] == "SIGTERM" and summary["step"] == 2
    assert summary["checkpoint"] == str(tmp_path / "checkpoints" / "step_2")
    assert checkpoint_problems(tmp_path / "checkpoints" / "step_2") == []
    trainer.close()


@pytest.mark.parametrize("background", [True, False])
def test_ckpt_background_chooses_the_thread_that_writes(
    background: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop asks for a background save; ``ckpt.background=false`` writes it in the step."""
    writers: list[str] = []
    write = io.write_checkpoint

    def recorded(*args: Any, **kwargs: Any) -> Path:
        writers.append(threading.current_thread().name)
        return write(*args, **kwargs)

    monkeypatch.setattr(io, "write_checkpoint", recorded)
    trainer = _trainer(tmp_path, f"ckpt.background={str(background).lower()}")
    trainer.train_step()
    path = trainer.save_checkpoint(background=True)
    trainer.wait_for_checkpoint()
    assert writers == ["astrai-checkpoint-write" if background else "MainThread"]
    assert checkpoint_problems(path) == []
    trainer.close()
