"""Each YAML text parsed once per test process: ``OmegaConf.load`` through a cache.

Half of the fast suite's CPU is Hydra composing ``conf/`` (measured 2026-12-07: 668 composes,
155 of ~300 s), and each compose reads and parses the same ~23 YAML files again; PyYAML's pure
Python parser was 46 s of it. ``install`` (``tests/conftest.py``, in each test process) keys the
parse on the file's text, so an edited file is parsed anew, and hands every caller a fresh
``OmegaConf.create`` of a deep copy: what Hydra and astrai receive is what ``OmegaConf.load``
returns, node for node. ``train.py`` processes the tests start load as users' do.
"""

from __future__ import annotations

import copy
import functools
import os
import pathlib
from typing import IO, Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf._utils import get_yaml_loader


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> Any:
    """The object PyYAML builds for ``text`` with OmegaConf's loader (never handed out: copied)."""
    return yaml.load(text, Loader=get_yaml_loader())


def cached_load(file_: str | pathlib.Path | IO[Any]) -> DictConfig | ListConfig:
    """``OmegaConf.load``'s contract (a path or an open text file; the same errors)."""
    if isinstance(file_, str | pathlib.Path):
        with open(os.path.abspath(file_), encoding="utf-8") as f:
            text = f.read()
    elif getattr(file_, "read", None):
        text = file_.read()
    else:
        raise TypeError("Unexpected file type")
    obj = copy.deepcopy(_parse(text))
    if obj is not None and not isinstance(obj, list | dict | str):
        raise OSError(f"Invalid loaded object type: {type(obj).__name__}")
    return OmegaConf.create() if obj is None else OmegaConf.create(obj)


def install() -> None:
    """From now on, in this process, ``OmegaConf.load`` parses each distinct text once."""
    OmegaConf.load = staticmethod(cached_load)  # type: ignore[method-assign]
