"""One completeness check, five readers (issue 30, items 1 and 6): ``list``, ``prune`` and
``ckpt.keep_last`` retention, ``ckpt.resume`` (auto and explicit), ``generate``/``export``'s
latest checkpoint of a run dir, and ``verify`` agree on every damaged checkpoint directory.

Only entry points that predate the check are imported, so on the old code these tests fail on
what the readers do, not on an import.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.checkpoints.checkpoint_dirs import (
    copy_run,
    edit_state,
    strategy_named,
    truncate,
    write_checkpoint,
)
from tests.helpers import run_main

from astrai.checkpoints import io
from astrai.checkpoints.__main__ import main as checkpoints_cli
from astrai.checkpoints.layout import CheckpointError, CheckpointInfo
from astrai.checkpoints.policy import resolve_checkpoint
from astrai.checkpoints.verify import verify_checkpoint
from astrai.training.resume import resolve_resume

STEPS = (8, 9, 10)  # every run: three complete checkpoints, then step_10 is damaged


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One run dir per train_type, built once; each test damages a copy."""
    runs = {}
    for train_type in ("online_grpo", "online_ppo"):
        run_dir = tmp_path_factory.mktemp(train_type)
        for step in STEPS:
            write_checkpoint(run_dir / "checkpoints", step, train_type)
        runs[train_type] = run_dir
    return runs


def _list_statuses(run_dir: Path) -> dict[int, str]:
    """``list``'s status column, by step."""
    result = run_main(checkpoints_cli, ["list", str(run_dir)])
    assert result.returncode == 0, result.stderr
    statuses = {}
    for line in result.stdout.splitlines()[1:]:
        if not line.split()[0].isdigit():  # a stale temporary or a directory set aside
            continue
        step, _, _, _, rest = line.split(None, 4)
        statuses[int(step)] = rest.rsplit("  ", 1)[0]
    return statuses


# --- the issue's layout ---------------------------------------------------------------------


def test_prune_keeps_the_complete_and_skips_the_incomplete_of_the_issue(
    templates: dict[str, Path], tmp_path: Path
) -> None:
    """step_9 and step_10 complete, step_12 holding only model.safetensors: prune --keep 1
    used to delete step_9 and step_10 and keep step_12."""
    root = copy_run(templates["online_grpo"], tmp_path / "run")
    shutil.rmtree(root / "step_8")
    (root / "step_12").mkdir()
    shutil.copy(root / "step_10" / "model.safetensors", root / "step_12")

    statuses = _list_statuses(tmp_path / "run")
    assert statuses[9] == statuses[10] == "complete"
    assert statuses[12].startswith("incomplete: missing config.json, tokenizer.json, ")

    kept_two = run_main(checkpoints_cli, ["prune", str(root), "--keep", "2", "--force"])
    assert kept_two.returncode == 0, kept_two.stderr
    assert sorted(p.name for p in root.glob("step_*")) == ["step_10", "step_12", "step_9"]
    assert "deleted" not in kept_two.stdout
    assert f"skipped {root / 'step_12'} (incomplete: missing " in kept_two.stdout

    kept_one = run_main(checkpoints_cli, ["prune", str(root), "--keep", "1", "--force"])
    assert kept_one.returncode == 0, kept_one.stderr
    assert sorted(p.name for p in root.glob("step_*")) == ["step_10", "step_12"]
    assert kept_one.stdout.splitlines()[:2] == [
        f"deleted {root / 'step_9'}",
        f"skipped {root / 'step_12'} ({statuses[12]})",
    ]


# --- the table: one damage per row, five readers --------------------------------------------


def _unlink(name: str) -> Callable[[Path], None]:
    return lambda root: (root / "step_10" / name).unlink()


def _empty(root: Path) -> None:
    shutil.rmtree(root / "step_10")
    (root / "step_10").mkdir()


DAMAGED: dict[str, tuple[str, Callable[[Path], None], str]] = {
    # id: (train_type, damage to the run's checkpoints/ folder, the reason every reader names)
    "no trainer_state": (
        "online_grpo",
        _unlink("trainer_state.json"),
        "missing trainer_state.json",
    ),  # fmt: skip
    "no rng": (
        "online_grpo",
        lambda root: edit_state(root / "step_10", rng=..., rng_per_rank=...),
        "trainer_state.json: missing or invalid 'rng'",
    ),
    "train_type contradicts fingerprint": (
        "online_grpo",
        lambda root: edit_state(root / "step_10", train_type="online_ppo"),
        "trainer_state.json: train_type 'online_ppo' contradicts its fingerprint's train_type",
    ),
    "truncated model": (
        "online_grpo",
        lambda root: truncate(root / "step_10" / "model.safetensors"),
        "model.safetensors: unreadable safetensors file",
    ),
    "truncated optimizer": (
        "online_grpo",
        lambda root: truncate(root / "step_10" / "optimizer.pt"),
        "optimizer.pt: unreadable torch file",
    ),
    "ppo without value_model.pt": (
        "online_ppo",
        _unlink("value_model.pt"),
        "missing value_model.pt",
    ),  # fmt: skip
    "step mismatch": (
        "online_grpo",
        lambda root: edit_state(root / "step_10", step=7),
        "trainer_state.json: step 7 does not match its directory step_10",
    ),
    "empty dir": ("online_grpo", _empty, "missing model.safetensors, config.json"),
    "no reference": (
        "online_grpo",
        lambda root: (root / "reference.safetensors").unlink(),
        "reference.safetensors: missing",
    ),
}
ROWS = pytest.mark.parametrize("row", list(DAMAGED))


def _damaged_run(templates: dict[str, Path], tmp_path: Path, row: str) -> tuple[Path, str]:
    """(run dir, its train_type) with ``row``'s damage done to a copy of the template."""
    train_type, damage, _ = DAMAGED[row]
    root = copy_run(templates[train_type], tmp_path / "run")
    damage(root)
    return root.parent, train_type


def _complete(row: str) -> list[int]:
    """The steps every reader must treat as complete: without the run's reference, none."""
    return [] if row == "no reference" else [8, 9]


@ROWS
def test_list_names_the_damage(templates: dict[str, Path], tmp_path: Path, row: str) -> None:
    run_dir, _ = _damaged_run(templates, tmp_path, row)
    statuses = _list_statuses(run_dir)
    assert [step for step, status in statuses.items() if status == "complete"] == _complete(row)
    assert statuses[10].startswith("incomplete: ") and DAMAGED[row][2] in statuses[10]


@ROWS
def test_prune_and_retention_never_count_or_delete_it(
    templates: dict[str, Path], tmp_path: Path, row: str
) -> None:
    run_dir, _ = _damaged_run(templates, tmp_path, row)
    root = run_dir / "checkpoints"
    retained = copy_run(run_dir, tmp_path / "retained")
    # keep 1: the newest *complete* one and every incomplete one survive
    survivors = sorted({*_complete(row)[-1:], *(s for s in STEPS if s not in _complete(row))})
    pruned = run_main(checkpoints_cli, ["prune", str(run_dir), "--keep", "1", "--force"])
    assert pruned.returncode == 0, pruned.stderr
    assert sorted(int(p.name[5:]) for p in root.glob("step_*")) == survivors
    assert f"skipped {root / 'step_10'} (incomplete: " in pruned.stdout
    io.prune_checkpoints(retained, keep_last=1)  # what the trainer calls after each save
    assert sorted(int(p.name[5:]) for p in retained.glob("step_*")) == survivors


@ROWS
def test_resume_skips_it_and_refuses_it_by_name(
    templates: dict[str, Path], tmp_path: Path, row: str, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir, train_type = _damaged_run(templates, tmp_path, row)
    root, needle = run_dir / "checkpoints", DAMAGED[row][2]
    with pytest.raises(CheckpointError) as explicit:
        resolve_resume(str(root / "step_10"), run_dir, strategy_named(train_type))
    assert needle in str(explicit.value) and "\n" not in str(explicit.value)
    assert str(root / "step_10") in str(explicit.value)
    if not _complete(row):  # nothing to resume from, and starting over beside it is refused
        with pytest.raises(CheckpointError, match="no complete checkpoint") as auto:
            resolve_resume("auto", run_dir, strategy_named(train_type))
        assert needle in str(auto.value)
        return
    with caplog.at_level(logging.WARNING, logger="astrai.training.resume"):
        chosen = resolve_resume("auto", run_dir, strategy_named(train_type))
        assert chosen is not None and chosen.path == root / "step_9"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "step_10 (incomplete: " in warnings[0]
    assert needle in warnings[0] and warnings[0].endswith("resuming from step_9")
    named = resolve_resume(str(root / "step_9"), run_dir, strategy_named(train_type))
    assert named is not None and named.path == root / "step_9"


@ROWS
def test_generate_and_export_take_the_latest_complete(
    templates: dict[str, Path], tmp_path: Path, row: str
) -> None:
    run_dir, _ = _damaged_run(templates, tmp_path, row)
    if not _complete(row):
        with pytest.raises(CheckpointError, match="no complete checkpoint") as err:
            resolve_checkpoint(run_dir)
        assert DAMAGED[row][2] in str(err.value)
        return
    assert resolve_checkpoint(run_dir) == run_dir / "checkpoints" / "step_9"


@ROWS
def test_verify_fails_it_naming_the_damage(
    templates: dict[str, Path], tmp_path: Path, row: str
) -> None:
    run_dir, _ = _damaged_run(templates, tmp_path, row)
    root = run_dir / "checkpoints"
    verdicts = {
        step: verify_checkpoint(CheckpointInfo(step, root / f"step_{step}")) for step in STEPS
    }
    assert [step for step, v in verdicts.items() if v.ok] == _complete(row)
    reasons = " ".join([*verdicts[10].problems, verdicts[10].refusal or ""])
    assert DAMAGED[row][2] in reasons
    result = run_main(checkpoints_cli, ["verify", str(run_dir)])
    assert result.returncode in (1, 2)
    assert [line.split()[1] for line in result.stdout.splitlines() if line.startswith("OK ")] == [
        str(root / f"step_{step}") for step in _complete(row)
    ]


# --- a save of step N over an incomplete step_N ---------------------------------------------


def test_a_save_moves_an_incomplete_dir_of_its_step_aside(
    templates: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = copy_run(templates["online_grpo"], tmp_path / "run")
    shutil.rmtree(root / "step_10")
    (root / "step_10").mkdir()
    (root / "step_10" / "model.safetensors").write_bytes(b"restored half")
    with caplog.at_level(logging.WARNING, logger="astrai.checkpoints.io"):
        write_checkpoint(root, 10)
    aside = [p for p in root.iterdir() if p.name.startswith("step_10.incomplete-")]
    assert len(aside) == 1  # kept, not merged into the new step_10 and not deleted
    assert [p.name for p in aside[0].iterdir()] == ["model.safetensors"]
    assert (aside[0] / "model.safetensors").read_bytes() == b"restored half"
    assert _list_statuses(root.parent) == {8: "complete", 9: "complete", 10: "complete"}
    assert f"moved aside to {aside[0].name}" in caplog.text and "missing config.json" in caplog.text
