"""The repository paths astrai's entry points, tests and the launcher share."""

from __future__ import annotations

from pathlib import Path

from astrai.paths import CONFIG_DIR, REPO_ROOT


def test_config_dir_is_the_repositorys_conf() -> None:
    assert REPO_ROOT == Path(__file__).resolve().parents[1]
    assert Path(CONFIG_DIR) == REPO_ROOT / "conf"
    assert (Path(CONFIG_DIR) / "train.yaml").is_file()
