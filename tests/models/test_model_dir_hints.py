"""A missing model directory names the command that writes it (``make smollm2``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.train_runs import QUICK, run_train_in_process

from astrai.models import pretrained
from astrai.models.pretrained import ModelDirError, read_hf_config
from astrai.paths import REPO_ROOT


def test_the_smollm2_dir_make_writes_says_run_make_smollm2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pretrained, "REPO_ROOT", tmp_path)  # a checkout without models/smollm2
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelDirError) as err:
        read_hf_config("models/smollm2")
    assert str(err.value) == (
        "no model directory at models/smollm2: run `make smollm2` to convert "
        "SmolLM2-135M-Instruct into it"
    )


def test_other_missing_dirs_say_what_to_point_at(tmp_path: Path) -> None:
    with pytest.raises(ModelDirError, match="point at an existing Hugging Face model directory"):
        read_hf_config(tmp_path / "nope")


def test_train_with_smollm2_before_make_smollm2_is_one_line_exit_2(tmp_path: Path) -> None:
    """From a directory other than the checkout, the hint names where make writes it."""
    result = run_train_in_process(["model=smollm2", *QUICK], cwd=tmp_path)  # train.py's main
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "astrai: config error: model.path: no model directory at models/smollm2: run `make "
        f"smollm2` (in {REPO_ROOT}; it writes {REPO_ROOT / 'models' / 'smollm2'}) and give that "
        "path"
    ]
    assert list(tmp_path.iterdir()) == []  # nothing written
