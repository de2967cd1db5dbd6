"""``checkpoint_problems``: the cheap structural checks, file by file (the readers that use it
are compared on damaged directories in ``test_agreement.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.checkpoints.checkpoint_dirs import edit_state, write_checkpoint

from astrai.checkpoints.completeness import (
    check_state,
    checkpoint_problems,
    file_problem,
    scan_checkpoints,
)
from astrai.checkpoints.layout import CheckpointError


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("run") / "checkpoints", 3)


@pytest.fixture
def checkpoint(template: Path, tmp_path: Path) -> Path:
    shutil.copytree(template.parent, tmp_path / "checkpoints")
    return tmp_path / "checkpoints" / "step_3"


def test_a_checkpoint_the_writers_wrote_is_complete(checkpoint: Path) -> None:
    assert checkpoint_problems(checkpoint) == []
    [status] = scan_checkpoints(checkpoint.parent.parent)
    assert (status.info.step, status.describe()) == (3, "complete")


def test_required_files_follow_the_files_asked_for(checkpoint: Path) -> None:
    # what resume asks for a strategy with files of its own (PPO's ``checkpoint_files``)
    assert checkpoint_problems(checkpoint, ("value_model.pt", "value_optimizer.pt")) == [
        "missing value_model.pt, value_optimizer.pt"
    ]


def test_a_checkpoint_lists_its_algorithms_files_and_is_held_to_them(checkpoint: Path) -> None:
    state_file = checkpoint / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["extra_files"] = []  # what a GRPO run writes: nothing beyond the common files
    state_file.write_text(json.dumps(state))
    assert checkpoint_problems(checkpoint) == []
    state["extra_files"] = ["baseline.pt"]  # as a strategy with its own state would list
    state_file.write_text(json.dumps(state))
    assert checkpoint_problems(checkpoint) == ["missing baseline.pt"]
    state["extra_files"] = "baseline.pt"
    state_file.write_text(json.dumps(state))
    assert checkpoint_problems(checkpoint) == [
        f"{state_file}: invalid 'extra_files' (a list of file names)"
    ]


def test_a_format_1_ppo_checkpoint_needs_the_critic_files_it_had(checkpoint: Path) -> None:
    state_file = checkpoint / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state.pop("extra_files", None)
    state["train_type"] = state["fingerprint"]["train_type"] = "online_ppo"
    state_file.write_text(json.dumps(state))
    assert checkpoint_problems(checkpoint) == ["missing value_model.pt, value_optimizer.pt"]


def test_safetensors_must_end_where_its_header_says(checkpoint: Path) -> None:
    model = checkpoint / "model.safetensors"
    size = model.stat().st_size
    with model.open("ab") as f:
        f.write(b"\0")
    assert file_problem(model) == (
        f"{model}: unreadable safetensors file ({size + 1} bytes, its header says {size}: "
        "trailing bytes)"
    )
    model.write_bytes(model.read_bytes()[: size - 1])
    assert file_problem(model) == (
        f"{model}: unreadable safetensors file ({size - 1} bytes, its header says {size}: "
        "truncated)"
    )
    model.write_bytes(b"\x10\0\0\0\0\0\0\0{not json}......")
    assert str(file_problem(model)).startswith(f"{model}: unreadable safetensors file (bad header")
    model.write_bytes(b"\xff" * 8)
    assert (
        file_problem(model) == f"{model}: unreadable safetensors file (truncated header, 8 bytes)"
    )


def test_torch_json_and_yaml_files_must_parse(checkpoint: Path) -> None:
    optimizer = checkpoint / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:-1])  # the zip's end record is cut
    assert str(file_problem(optimizer)).startswith(f"{optimizer}: unreadable torch file (no ")
    tokenizer = checkpoint / "tokenizer.json"
    tokenizer.write_text('{"type": "char"')
    assert str(file_problem(tokenizer)).startswith(f"{tokenizer}: unreadable JSON (")
    config = checkpoint / "config.yaml"
    config.write_text("- a list\n")
    assert file_problem(config) == f"{config}: unreadable YAML (not a mapping)"
    problems = checkpoint_problems(checkpoint)
    assert [p.split(":", 1)[0] for p in problems] == [str(tokenizer), str(optimizer), str(config)]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"policy_version": True}, "missing or invalid 'policy_version'"),
        ({"initial_metrics": ...}, "missing or invalid 'initial_metrics'"),
        ({"train_type": 3}, "missing or invalid 'train_type'"),
        ({"eval_pending": "yes"}, "invalid 'eval_pending' (true or false)"),
        ({"rng_per_rank": {"0": {}}}, "invalid 'rng_per_rank' (a list of RNG states)"),
    ],
)
def test_each_field_a_restore_reads_is_checked(
    checkpoint: Path, changes: dict, problem: str
) -> None:
    edit_state(checkpoint, **changes)
    state_file = checkpoint / "trainer_state.json"
    assert checkpoint_problems(checkpoint) == [f"{state_file}: {problem}"]
    # restore raises the same line
    with pytest.raises(CheckpointError) as err:
        check_state(json.loads(state_file.read_text()), state_file)
    assert str(err.value) == f"{state_file}: {problem}"


def test_a_state_that_is_not_an_object_and_a_file_as_step_dir(checkpoint: Path) -> None:
    state_file = checkpoint / "trainer_state.json"
    state_file.write_text("[1, 2]")
    assert f"{state_file}: expected a JSON object" in checkpoint_problems(checkpoint)
    stray = checkpoint.parent / "step_4"
    stray.write_text("")
    assert checkpoint_problems(stray) == [f"{stray}: not a directory"]
