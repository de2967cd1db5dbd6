"""The machine saying no during a run (a full disk, a path that cannot be written): one line,
exit 2, and the run dir keeps what the run did so far."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest
import torch
from tests.train_runs import run_train, run_train_in_process

from astrai.checkpoints import io
from astrai.cli_errors import error_line
from astrai.files import naming_write_errors
from astrai.models.hf_tokenizer import save_char_tokenizer_as_hf
from astrai.models.tokenizer import CharTokenizer


def _train(run_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    return run_train(["debug=quick", f"hydra.run.dir={run_dir}"], cwd, timeout=180)


@pytest.mark.slow  # ~5 s each: one train.py run
def test_a_full_disk_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # every write to /dev/full fails with ENOSPC: the run's config.yaml lands on a "full disk"
    (run_dir / "config.yaml").symlink_to("/dev/full")
    result = _train(run_dir, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"astrai: I/O error: {run_dir / 'config.yaml'}: No space left on device"
    ]


@pytest.mark.slow
def test_a_checkpoint_dir_that_cannot_be_made_is_one_line_naming_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").write_text("a file where the run's checkpoints/ would go")
    result = _train(run_dir, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("astrai: I/O error: ") and str(run_dir / "checkpoints") in line, line


# ------------------------------------------- disk full in every file kind a checkpoint writes

RUST_NO_SPACE = (
    'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
    'left on device" })'
)


def _no_space_safetensors(*args: object, **kwargs: object) -> None:
    from safetensors import SafetensorError

    raise SafetensorError(RUST_NO_SPACE)


def _no_space_os(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")  # a write's: no file name


def _no_space_tokenizers(*args: object, **kwargs: object) -> None:
    raise Exception("No space left on device (os error 28)")  # tokenizers' Rust io::Error


def _hf_tokenizer_files(path: Path) -> None:
    save_char_tokenizer_as_hf(CharTokenizer(), path.parent)


# file name -> (its writer, what to patch so the disk is full: object, attribute, fake)
FILE_KINDS = {
    "model.safetensors": (
        lambda p: io.save_tensors({"w": torch.zeros(2)}, p),
        (io, "save_file", _no_space_safetensors),
    ),
    "optimizer.pt": (lambda p: io.save_torch({"step": 1}, p), (torch, "save", _no_space_os)),
    "trainer_state.json": (lambda p: io.save_json({"step": 1}, p), (Path, "write_text", None)),
    # the run's config.yaml, written as training.checkpointing writes it
    "config.yaml": (lambda p: p.write_text("seed: 0\n"), (Path, "write_text", None)),
    "tokenizer.json": (lambda p: CharTokenizer().save(p.parent), (Path, "write_text", None)),
    # an export's tokenizer files: tokenizer.json through tokenizers, then this one
    "tokenizer_config.json": (_hf_tokenizer_files, (Path, "write_text", None)),
}


@pytest.mark.parametrize("name", list(FILE_KINDS))
def test_a_full_disk_names_the_file_for_every_kind_a_checkpoint_writes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """safetensors' own ``SafetensorError`` (not an ``OSError``), torch's writer and a plain
    write's ``OSError`` without a file name: each is an ``OSError`` naming the file, so the
    CLIs print ``PATH: No space left on device`` in one line; nothing of the checkpoint is
    left (no ``step_1``, no temporary)."""
    writer, (target, attribute, fake) = FILE_KINDS[name]
    monkeypatch.setattr(target, attribute, fake or _no_space_os)
    root = tmp_path / "checkpoints"
    with pytest.raises(OSError) as caught:
        io.write_checkpoint(root, 1, {name: writer})
    line = error_line(caught.value)
    assert caught.value.errno == errno.ENOSPC, line
    assert line.startswith(str(root)) and line.endswith(f"/{name}: No space left on device"), line
    assert list(root.iterdir()) == []


@pytest.mark.parametrize(
    ("raised", "cause"),
    [
        (RUST_NO_SPACE, "No space left on device"),
        ("No space left on device (os error 28)", "No space left on device"),  # tokenizers'
        ("Disk quota exceeded (os error 122)", "Disk quota exceeded"),
    ],
)
def test_a_rust_io_error_becomes_an_os_error_naming_the_file(
    raised: str, cause: str, tmp_path: Path
) -> None:
    from safetensors import SafetensorError

    with pytest.raises(OSError) as caught, naming_write_errors(tmp_path / "f"):
        raise SafetensorError(raised) if "Os {" in raised else Exception(raised)
    assert error_line(caught.value) == f"{tmp_path / 'f'}: {cause}"


def test_an_unrelated_exception_passes_through(tmp_path: Path) -> None:
    with pytest.raises(KeyError), naming_write_errors(tmp_path / "f"):
        raise KeyError("not a write")


@pytest.mark.slow  # 2-12 s (a loaded machine): one in-process train.py run
def test_a_full_disk_in_safetensors_mid_run_is_one_line_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(io, "save_file", _no_space_safetensors)
    run_dir = tmp_path / "run"
    result = run_train_in_process(["debug=quick", f"hydra.run.dir={run_dir}"], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"astrai: I/O error: {run_dir / 'checkpoints'}/"), line
    assert line.endswith(".safetensors: No space left on device") or (
        ".safetensors.tmp-" in line and line.endswith(": No space left on device")
    ), line


@pytest.mark.slow  # 2-12 s (a loaded machine): one in-process train.py run
def test_a_full_disk_in_a_background_write_is_one_line_at_the_next_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 2's checkpoint, written in the background (``ckpt.background``), meets a full disk:
    step 3's save raises it in the one line a save in the step gives, exit 2; step 1's
    checkpoint is kept, nothing of step 2's is left and no summary claims a checkpoint."""
    save_torch = io.save_torch

    def full_at_step_2(payload: object, path: Path) -> None:
        if path.parent.name.startswith(".step_2."):
            _no_space_os()
        save_torch(payload, path)

    monkeypatch.setattr(io, "save_torch", full_at_step_2)
    run_dir = tmp_path / "run"
    args = ["debug=quick", "trainer.total_steps=4", "ckpt.every_steps=1", "ckpt.keep_last=5"]
    result = run_train_in_process([*args, f"hydra.run.dir={run_dir}"], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = result.stderr.strip().splitlines()
    root = run_dir / "checkpoints"
    # the checkpoint's final name, not its temporary's (removed by then)
    assert line == f"astrai: I/O error: {root / 'step_2' / 'optimizer.pt'}: No space left on device"
    assert sorted(p.name for p in root.iterdir()) == ["reference.safetensors", "step_1"]
    assert not (run_dir / "summary.json").exists()
