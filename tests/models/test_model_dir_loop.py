"""``model.path`` (and a reward model's ``reward.path``) that is a symlink loop says so, not "no
model directory at ... point at an existing Hugging Face model directory"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from astrai.config.compose import check_run_config
from astrai.config.errors import ConfigError


@pytest.mark.parametrize(
    ("key", "group"), [("model.path", "model=hf"), ("reward.path", "reward=model")]
)
def test_a_model_path_that_is_a_symlink_loop_says_so(tmp_path: Path, key: str, group: str) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(ConfigError, match=re.escape(f"{loop} is a symlink loop")):
        check_run_config([group, f"{key}={loop}"])
