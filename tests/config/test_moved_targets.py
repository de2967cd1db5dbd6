"""``config.moved_targets``: a run's ``config.yaml`` saved before the engines moved into
``rollout.engines`` still names its engine and sampling classes where they were; read back it
names them where they are."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from tests.helpers import compose_config

from astrai.config.checkpoint_run import read_run_config
from astrai.config.moved_targets import MOVED_TARGETS, current_targets
from astrai.config.plain_config import typed_config
from astrai.generation_engine import engine_config


def _old_run_yaml(engine: str = "torch") -> str:
    """A run's resolved config as a run before the move saved it."""
    text = OmegaConf.to_yaml(compose_config([f"engine={engine}"], validate=False), resolve=True)
    for old, new in MOVED_TARGETS.items():
        text = text.replace(new, old)
    assert "astrai.rollout.engines" not in text
    return text


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_TARGETS.items()))
def test_each_old_name_is_gone_and_its_new_name_imports(old: str, new: str) -> None:
    old_module, _, _ = old.rpartition(".")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old_module)
    module, _, name = new.rpartition(".")
    assert getattr(importlib.import_module(module), name).__name__ == name


def test_every_target_at_any_depth_is_renamed_and_the_input_kept() -> None:
    saved = OmegaConf.create(
        {
            "engine": {"_target_": "astrai.rollout.engine.TorchEngine", "old_logprobs": "bypass"},
            "train_type": {"sampling": {"_target_": "astrai.rollout.sampler.SamplingConfig"}},
            "task": {"_target_": "astrai.tasks.arithmetic.Arithmetic", "x": "${seed}"},
            "loggers": [{"_target_": "astrai.rollout.seeded_vllm.SeededVLLM"}],
        }
    )
    current = current_targets(saved)
    assert current.engine._target_ == "astrai.rollout.engines.engine.TorchEngine"
    assert current.engine.old_logprobs == "bypass"
    assert current.train_type.sampling._target_ == "astrai.rollout.engines.sampler.SamplingConfig"
    assert current.loggers[0]._target_ == "astrai.rollout.engines.seeded_vllm.SeededVLLM"
    assert current.task._target_ == "astrai.tasks.arithmetic.Arithmetic"  # not moved: kept
    assert OmegaConf.to_container(current.task)["x"] == "${seed}"  # left unresolved
    assert saved.engine._target_ == "astrai.rollout.engine.TorchEngine"  # a copy


def test_a_checkpoint_saved_before_the_move_is_read_with_the_new_names(tmp_path: Path) -> None:
    saved = OmegaConf.create(_old_run_yaml("vllm"))
    saved.engine.kv_cache_space_gib = 3  # a knob of the run's engine, not its default
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    run = read_run_config(SimpleNamespace(source=tmp_path), tmp_path)  # type: ignore[arg-type]
    assert run is not None
    assert run.engine._target_ == "astrai.rollout.engines.seeded_vllm.SeededVLLM"
    assert run.train_type.sampling._target_ == "astrai.rollout.engines.sampler.SamplingConfig"
    # generate keeps the knobs of the engine the run sampled with: the same engine
    assert engine_config("vllm", run, seed=0, precision=None).kv_cache_space_gib == 3


def test_a_config_yaml_saved_before_the_move_is_typed_with_the_new_names() -> None:
    typed = typed_config(OmegaConf.create(_old_run_yaml()))
    assert typed.engine._target_ == "astrai.rollout.engines.engine.TorchEngine"
    assert typed.train_type.sampling._target_ == "astrai.rollout.engines.sampler.SamplingConfig"
