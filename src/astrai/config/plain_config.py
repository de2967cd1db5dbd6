"""A config built without Hydra, made into the typed config ``astrai.compose`` gives.

``OmegaConf.create({...})`` or ``OmegaConf.load("<run dir>/config.yaml")`` (a run's resolved
config) has no schema behind it: nothing checks its types or key names, and a key it lacks is
missing rather than defaulted. ``typed_config`` composes the job its group nodes describe (each
group's option is the one whose ``_target_``, or ``name`` for ``critic`` and ``infra``, it
carries; the default where it says nothing or that matches) and merges the plain config onto
it, so every value goes through the schemas, a key it does not set keeps its default, and an
unknown key or a wrong type is one ``ConfigError`` naming the key. A run's own ``config.yaml``
comes back as the config that run composed (a ``_target_`` since moved under its new name:
``moved_targets``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from astrai.config.errors import ConfigError, first_line
from astrai.config.moved_targets import current_targets

# the key of a group's node that tells its options apart
CHOICE_KEYS = {
    "train_type": "_target_",
    "model": "_target_",
    "engine": "_target_",
    "critic": "name",
    "task": "_target_",
    "reward": "_target_",
    "env": "_target_",
    "collector": "_target_",
    "infra": "name",
}
LOGGERS = ("tensorboard", "wandb", "mlflow")  # conf/logger/'s options, each its own key
OFF = (None, "false", "null")  # a logger's value when it is not selected


def is_composed(cfg: DictConfig) -> bool:
    """Whether ``cfg`` came from Hydra's compose (``astrai.compose``, edited or not): its
    ``trainer`` node is typed by the schema. A plain config's is a plain map, or absent."""
    from astrai.config.schema import TrainerConfig

    node = cfg._get_node("trainer", throw_on_missing_key=False)
    return isinstance(node, DictConfig) and OmegaConf.get_type(node) is TrainerConfig


def typed_config(plain: DictConfig) -> DictConfig:
    """``plain`` merged onto the composed config of the group options it describes
    (``group_overrides``); ``ConfigError`` naming the key for a key no schema has or a value of
    the wrong type. Validation (``validate_config``) is the caller's."""
    from astrai.config.compose import compose_train_config
    from astrai.config.keys import known_keys, unknown_key_message

    plain = current_targets(plain)  # a config.yaml saved before a module moved
    overrides = group_overrides(plain)
    base = compose_train_config(overrides, validate=False)
    try:
        return OmegaConf.merge(base, plain)  # type: ignore[return-value]
    except ConfigKeyError as err:
        raise ConfigError(unknown_key_message(_key(err), known_keys(base))) from None
    except OmegaConfBaseException as err:
        raise ConfigError(f"{_key(err)}: {first_line(err)}") from None


def group_overrides(plain: DictConfig) -> list[str]:
    """``group=option`` for each group whose node in ``plain`` names an option other than the
    default (by its ``CHOICE_KEYS`` value), and ``logger=[...]`` when it sets W&B or MLflow."""
    from astrai.config.help import default_options, group_options, yaml_entry
    from astrai.paths import CONFIG_DIR

    conf = Path(CONFIG_DIR)
    defaults = default_options(conf / "train.yaml")
    overrides = []
    for group, key in CHOICE_KEYS.items():
        wanted = _plain_value(plain, f"{group}.{key}")
        if wanted is None:
            continue
        matching = [
            option
            for option in group_options(group, conf)
            if _yaml_value(yaml_entry, conf / group / f"{option}.yaml", key) == wanted
        ]
        if matching and defaults.get(group) not in matching:
            overrides.append(f"{group}={matching[0]}")
    chosen = [name for name in LOGGERS if _plain_value(plain, f"logger.{name}") not in OFF]
    if any(name in chosen for name in ("wandb", "mlflow")):
        overrides.append(f"logger=[{','.join(chosen)}]")
    return overrides


def _plain_value(plain: DictConfig, key: str) -> str | None:
    """The value at ``key`` as YAML would write a scalar (``null`` for None), None when the
    key is absent, missing or not a scalar."""
    try:
        value: Any = OmegaConf.select(plain, key, default=None, throw_on_missing=False)
    except OmegaConfBaseException:  # an interpolation that does not resolve
        return None
    if value is None:
        return "null" if _has_key(plain, key) else None
    if isinstance(value, DictConfig):
        return "set"
    if OmegaConf.is_list(value) or value == "???":
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _has_key(plain: DictConfig, key: str) -> bool:
    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(plain, parent, default=None) if parent else plain
    return isinstance(node, DictConfig) and name in node


def _yaml_value(read: Any, path: Path, key: str) -> str | None:
    """``key``'s value as written in the option file ``path`` (None when it has none)."""
    try:
        value, _ = read(path, key)
    except (KeyError, OSError):
        return None
    return str(value).strip("'\"")


def _key(err: OmegaConfBaseException) -> str:
    """The dotted key an OmegaConf merge error is about."""
    return str(getattr(err, "full_key", "") or getattr(err, "key", "") or "config")
