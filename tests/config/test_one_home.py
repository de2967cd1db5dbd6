"""One home per knob: the YAML under ``conf/`` holds every value.

Walks every option of every config group and checks that

1. the schemas registered in Hydra's ConfigStore hold types only (every leaf ``MISSING``);
2. every option composes to a config without a ``MISSING`` value (except the keys a user must
   give, like ``model.path``);
3. every astrai class or function an option builds (``_target_``) gets every argument from the
   YAML, and each default it still has equals what the YAML composes — so no value in code can
   differ from the shipped config, and none applies silently.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf
from tests.helpers import compose_config

from astrai.config import schema
from astrai.config.store import GROUP_SCHEMAS
from astrai.models.llama import LlamaConfig
from astrai.paths import CONFIG_DIR

CONF = Path(CONFIG_DIR)

# keys a user must set on the command line (documented ``???`` in the YAML)
REQUIRED_FROM_USER = {
    ("model", "hf"): {"path"},
    ("task", "dataset"): {"train_path"},
    ("reward", "model"): {"path"},
    ("reward", "custom"): {"_target_"},
}
# arguments the trainer passes at run time, not the config
RUNTIME_ARGUMENTS = {"optimizer", "total_steps", "prompts", "responses", "answers"}
# targets that take ``**kwargs`` and hand them to a config class: check that class's fields
KWARGS_CLASSES: dict[str, type] = {"astrai.models.llama.build_llama": LlamaConfig}
# a target shared by several options has defaults that can equal only one of them
DEFAULTS_MIRROR = {"astrai.models.llama.build_llama": ("model", "tiny")}


# groups composed into every train_type (and the critic's optimizer), not chosen on their own
SHARED_BLOCKS = ("sampling", "optimizer", "scheduler")


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _override(group: str, option: str) -> list[str]:
    """How ``python train.py`` selects ``option`` of ``group``."""
    if group in SHARED_BLOCKS:
        return [f"{group}@train_type.{group}={option}"]
    if group == "critic" and option == "value_model":
        return ["train_type=online_ppo"]  # PPO selects it (its optimizer is a shared block)
    return [f"{group}={option}"]


CASES = [
    (group, option)
    for group in (
        "train_type",
        "model",
        "critic",
        "task",
        "reward",
        "infra",
        "logger",
        *SHARED_BLOCKS,
    )
    for option in _options(group)
]


def _leaves(node: Any, path: str = "") -> list[str]:
    """Dotted paths of every leaf of a config node (``MISSING`` leaves included)."""
    if not isinstance(node, DictConfig) or node._is_none():  # a dict-typed leaf set to null
        return [path]
    paths = []
    for key in node.keys():
        value = node._get_node(key)
        child = f"{path}.{key}" if path else str(key)
        nested = isinstance(value, DictConfig) and not value._is_none()
        paths += _leaves(value, child) if nested else [child]
    return paths


def _is_missing(cfg: DictConfig, path: str) -> bool:
    parent, _, key = path.rpartition(".")
    return OmegaConf.is_missing(OmegaConf.select(cfg, parent) if parent else cfg, key)


def _parameters(target: str) -> dict[str, Any]:
    """Name -> default (``inspect.Parameter.empty`` when none) of what ``target`` takes from
    the config, following ``**kwargs`` up the class hierarchy (the strategies) or into the
    config class it builds (``build_llama``)."""
    obj = get_object(target)
    if target in KWARGS_CLASSES:
        own = inspect.signature(obj).parameters.values()
        return {
            **{p.name: p.default for p in own if p.kind is not p.VAR_KEYWORD},
            **{
                f.name: f.default
                if f.default is not dataclasses.MISSING
                else inspect.Parameter.empty
                for f in dataclasses.fields(KWARGS_CLASSES[target])
            },
        }
    owners = obj.__mro__ if isinstance(obj, type) else (obj,)
    params: dict[str, Any] = {}
    for owner in owners:
        function = owner.__init__ if isinstance(owner, type) else owner
        signature = inspect.signature(function)
        takes_more = False
        for name, param in signature.parameters.items():
            if param.kind is param.VAR_KEYWORD:
                takes_more = True
            elif name != "self" and param.kind is not param.VAR_POSITIONAL:
                params.setdefault(name, param.default)
        if not takes_more:
            break
    return {name: d for name, d in params.items() if name not in RUNTIME_ARGUMENTS}


def target_drifts(node: DictConfig, case: tuple[str, str]) -> list[str]:
    """Problems of one ``_target_`` node: arguments the YAML leaves to a code default, and
    defaults that differ from the composed value."""
    target = node["_target_"]
    problems = []
    for name, default in _parameters(target).items():
        if name not in node.keys():  # ``in`` alone skips a ``???`` value
            problems.append(f"{target}: argument {name!r} is not set in the YAML")
            continue
        mirror = DEFAULTS_MIRROR.get(target, case)
        if default is inspect.Parameter.empty or mirror != case:
            continue
        if OmegaConf.is_missing(node, name):
            continue
        value = OmegaConf.to_container(node, resolve=True)[name]  # type: ignore[index]
        if value != default:
            problems.append(f"{target}: default {name}={default!r}, the YAML composes {value!r}")
    return problems


def _target_nodes(node: Any) -> list[DictConfig]:
    """Every node under ``node`` whose ``_target_`` is an astrai class or function."""
    if not isinstance(node, DictConfig) or node._is_none():
        return []
    found = []
    if "_target_" in node and str(node["_target_"]).startswith("astrai."):
        found.append(node)
    for key in node.keys():
        found += _target_nodes(node._get_node(key))
    return found


def test_schemas_hold_types_only() -> None:
    schemas = [schema.TrainConfig] + [
        node for nodes in GROUP_SCHEMAS.values() for node in nodes.values()
    ]
    for node in schemas:
        structured = OmegaConf.structured(node)
        values = [leaf for leaf in _leaves(structured) if not _is_missing(structured, leaf)]
        assert not values, f"{node.__name__} holds values for {values}: they belong in conf/"


@pytest.mark.parametrize(("group", "option"), CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_every_option_sets_every_value_and_no_code_default_differs(group: str, option: str) -> None:
    cfg = compose_config(_override(group, option), validate=False)
    node = cfg.train_type[group] if group in SHARED_BLOCKS else cfg[group]
    allowed = REQUIRED_FROM_USER.get((group, option), set())
    missing = [leaf for leaf in _leaves(cfg) if _is_missing(cfg, leaf)]
    assert [leaf for leaf in missing if leaf.split(".", 1)[-1] not in allowed] == []
    problems = [p for n in _target_nodes(node) for p in target_drifts(n, (group, option))]
    assert problems == []


def test_the_walk_finds_a_drifted_default_and_an_unset_argument() -> None:
    # AdditionTask's defaults equal conf/task/addition.yaml; a YAML that said otherwise, or that
    # left an argument to the code, is reported
    node = OmegaConf.create(
        {"_target_": "astrai.tasks.arithmetic.AdditionTask", "num_digits": 1, "num_digits_b": None}
    )
    assert target_drifts(node, ("task", "addition")) == [
        "astrai.tasks.arithmetic.AdditionTask: argument 'eval_fraction' is not set in the YAML"
    ]
    node.eval_fraction = 0.3
    assert target_drifts(node, ("task", "addition")) == [
        "astrai.tasks.arithmetic.AdditionTask: default eval_fraction=0.2, the YAML composes 0.3"
    ]
    structured = OmegaConf.structured(schema.SortTaskConfig)
    assert all(_is_missing(structured, leaf) for leaf in _leaves(structured))


def test_llama_config_defaults_are_the_tiny_preset() -> None:
    tiny = compose_config(["model=tiny"], validate=False).model
    # the declared defaults (``__post_init__`` resolves head_dim and model_type from None)
    defaults = {field.name: field.default for field in dataclasses.fields(LlamaConfig)}
    assert {key: tiny[key] for key in defaults} == defaults
