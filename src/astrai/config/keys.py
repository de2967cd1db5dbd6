"""Keys the schemas do not define: ``+trainer.total_step=10`` must fail, not run a full job.

Hydra lets ``+key=value`` add any key, even to a typed node, and the typo'd key is then
silently ignored. After composition every key of a node typed by a schema
(``astrai.config.schema``) must be one of its fields. Open maps stay open: untyped nodes
(``infra.environment``, an optimizer's keyword arguments, ``reward=custom``, the terms of
``reward=weighted``) and the reward node, whose extra keys are its constructor's keyword
arguments (``+reward.max_words=50``, documented in ``conf/reward/custom.yaml``).
"""

from __future__ import annotations

import dataclasses
import difflib

from omegaconf import DictConfig, OmegaConf

from astrai.config.errors import ConfigError
from astrai.config.foreign_names import foreign_name, foreign_name_hint

# typed nodes whose extra keys are meant (keyword arguments of their ``_target_``)
OPEN_NODES = frozenset({"reward"})
# Hydra's own node: present in a job config that a launcher composes (``load_sweep_config``)
SKIPPED_ROOT_KEYS = frozenset({"hydra"})
POLICY_ROOT = "train_type."  # where the policy's knobs live (the critic's: critic.)


def _schema_fields(node: DictConfig) -> set[str] | None:
    """The field names of ``node``'s schema, or None for an untyped (open) node."""
    kind = OmegaConf.get_type(node)
    if kind is None or not dataclasses.is_dataclass(kind):
        return None
    return {f.name for f in dataclasses.fields(kind)}


def _walk(node: DictConfig, path: str, known: list[str], unknown: list[str]) -> None:
    fields = None if path in OPEN_NODES else _schema_fields(node)
    for key in node.keys():
        name = str(key)
        if not path and name in SKIPPED_ROOT_KEYS:
            continue
        child = f"{path}.{name}" if path else name
        if fields is not None and name not in fields:
            unknown.append(child)
            continue
        known.append(child)
        value = node._get_node(key)
        if isinstance(value, DictConfig) and not value._is_missing() and not value._is_none():
            _walk(value, child, known, unknown)


def _policy_first(key: str) -> tuple[bool, int]:
    """Sort key among keys of one last part: the policy's knob before the critic's
    (``lr``: ``train_type.optimizer.lr``), then the shortest."""
    return not key.startswith(POLICY_ROOT), len(key)


def closest_key(key: str, known: list[str]) -> str | None:
    """The known dotted key closest to ``key``: one with the same last part under ``key``'s
    parent (``train_type.lr`` -> ``train_type.optimizer.lr``), else a close sibling
    (``trainer.total_step`` -> ``trainer.total_steps``), else one with the same last part
    anywhere (``total_steps`` -> ``trainer.total_steps``), else any key with a close last part."""
    parent, _, name = key.rpartition(".")
    same_name = [k for k in known if k != key and k.rpartition(".")[2] == name]
    under = [k for k in same_name if parent and k.startswith(f"{parent}.")]
    if under:
        return min(under, key=_policy_first)
    siblings = [k for k in known if k.rpartition(".")[0] == parent]
    match = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
    if match:
        return match[0]
    if same_name:
        return min(same_name, key=_policy_first)
    by_name: dict[str, str] = {}
    for k in known:  # shortest path wins for a name defined in several places
        last = k.rpartition(".")[2]
        if last not in by_name or len(k) < len(by_name[last]):
            by_name[last] = k
    match = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.75)
    return by_name[match[0]] if match else None


def unknown_key_message(key: str, known: list[str]) -> str:
    """``trainer.total_step is not a config key (did you mean trainer.total_steps?)``; for a
    TRL or verl name (``astrai.config.foreign_names``), astrai's key:
    ``num_generations is TRL's name: astrai's key is train_type.group_size``. A key of the same
    last part under ``key``'s parent wins over the table (``train_type.lr``)."""
    parent, _, name = key.rpartition(".")
    suggestion = closest_key(key, known)
    same_under_parent = (
        suggestion is not None
        and bool(parent)
        and suggestion.startswith(f"{parent}.")
        and suggestion.rpartition(".")[2] == name
    )
    foreign = None if same_under_parent else foreign_name(key)
    if foreign is not None:
        hint = foreign_name_hint(*foreign)
        return hint if foreign[0] == key else f"{key} is not a config key; {hint}"
    hint = f" (did you mean {suggestion}?)" if suggestion else ""
    return f"{key} is not a config key{hint}"


def known_keys(cfg: DictConfig) -> list[str]:
    """Every dotted key of ``cfg`` its schemas define (open maps' own keys included)."""
    known: list[str] = []
    _walk(cfg, "", known, [])
    return known


def check_known_keys(cfg: DictConfig) -> None:
    """Raise ``ConfigError`` naming the first key of ``cfg`` that no schema defines."""
    known: list[str] = []
    unknown: list[str] = []
    _walk(cfg, "", known, unknown)
    if unknown:
        raise ConfigError(unknown_key_message(unknown[0], known))
