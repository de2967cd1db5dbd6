"""``python train.py --help``: options from conf/, defaults and meanings from the YAML lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.train_runs import TRAIN

from astrai.config.help import help_text, yaml_entry
from astrai.paths import CONFIG_DIR


def test_yaml_entry_reads_value_and_comment_of_a_nested_key(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("a: 1  # top\nb:\n  a: 2   # nested a\n  c: x # the c\n")
    assert yaml_entry(path, "a") == ("1", "top")
    assert yaml_entry(path, "b.a") == ("2", "nested a")
    assert yaml_entry(path, "b.c") == ("x", "the c")
    with pytest.raises(KeyError):
        yaml_entry(path, "b.d")


def test_help_lists_yaml_options_and_common_keys_never_schemas() -> None:
    text = help_text()
    lines = text.splitlines()
    assert "  train_type  online_grpo*, online_ppo" in lines
    assert "  scheduler   warmup_constant, warmup_cosine*" in lines
    assert (
        "  trainer.total_steps=1200                RL steps (one rollout + its update epochs each)"
        in lines
    )
    assert "  train_type.optimizer.lr=1.0e-3          learning rate" in lines
    assert "base_" not in text and "schema" not in text
    assert "docs/configuration.md" in text
    experiments = sorted(p.stem for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml"))
    assert f"  experiment=NAME   {', '.join(experiments)}" in lines


def test_help_lists_every_config_group_of_conf() -> None:
    lines = help_text().splitlines()
    groups = [p.name for p in Path(CONFIG_DIR).iterdir() if p.is_dir() and any(p.glob("*.yaml"))]
    assert "engine" in groups
    for group in groups:  # a group=option line, a block line or a preset line
        assert any(line.startswith((f"  {group} ", f"  {group}=NAME")) for line in lines), group


def test_help_has_a_real_model_section_with_defaults_and_meanings_from_the_yaml() -> None:
    lines = help_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Real model"))
    section = lines[start + 1 : lines.index("", start)]
    keys = [line.split()[0].partition("=")[0] for line in section if "=" in line.split()[0]]
    assert keys[:6] == [
        "model.path",
        "model.lora.rank",
        "task.train_path",
        "train_type.sampling.max_new_tokens",
        "infra.device",
        "infra.precision",
    ]
    conf = Path(CONFIG_DIR)
    value, comment = yaml_entry(conf / "model" / "lora" / "default.yaml", "rank")
    assert f"  {'model.lora.rank=' + value:<40}{comment}" in section
    assert section[0].startswith("  model.path=???") and "model directory" in section[0]
    # a comment that goes on over the next lines is cut after its last complete clause
    assert section[5].endswith("fp32 | bf16: bf16 autocast for forward passes and sampling")


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_help_into_a_closed_pipe_exits_141_without_a_traceback() -> None:
    """``python train.py --help | head -1``: the reader gone before the page is written."""
    child = subprocess.Popen(
        [sys.executable, TRAIN, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # before the child has started: its write finds no reader
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141 and stderr == "", stderr
