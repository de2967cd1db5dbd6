"""``tests/yaml_cache.py``: the cached ``OmegaConf.load`` returns what the real one does, a fresh
config each call, and parses an edited file anew."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests.yaml_cache import cached_load


def test_a_cached_load_equals_the_real_one_and_is_a_fresh_config_each_time(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("a: 1\nb: [x, 2.5, null]\nc: {d: '${a}'}\nf: 1e-3\n")
    import yaml
    from omegaconf._utils import get_yaml_loader  # the real load, not the installed cache

    real = OmegaConf.create(yaml.load(path.read_text(), Loader=get_yaml_loader()))
    first = cached_load(path)
    assert first == real and OmegaConf.to_container(first) == OmegaConf.to_container(real)
    assert first.c.d == 1 and first.f == 0.001  # interpolation, OmegaConf's float resolver
    first.b.append("mutated")
    first.a = 5
    second = cached_load(io.StringIO(path.read_text()))
    assert second == real  # the first caller's edits are its own
    path.write_text("a: 2\n")
    assert cached_load(str(path)) == OmegaConf.create({"a": 2})  # new text, parsed anew


def test_the_real_loads_errors_stay() -> None:
    with pytest.raises(TypeError, match="Unexpected file type"):
        cached_load(42)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="duplicate key"):
        cached_load(io.StringIO("a: 1\na: 2\n"))
