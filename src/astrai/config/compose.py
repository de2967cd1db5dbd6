"""``conf/train.yaml`` composed outside ``python train.py`` (tests, benchmarks, the CLIs), and
the check ``python train.py`` runs on its overrides before Hydra starts a job."""

from __future__ import annotations

import re

from omegaconf import DictConfig

from astrai.config.errors import ConfigError


def compose_train_config(overrides: list[str] | None = None, validate: bool = True) -> DictConfig:
    """The config ``python train.py overrides...`` would run, validated like it unless
    ``validate`` is False; raises Hydra's errors for unknown groups or keys."""
    from hydra import compose, initialize_config_dir

    from astrai.config.store import register_configs
    from astrai.config.validate import validate_config
    from astrai.paths import CONFIG_DIR

    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides or [])
    if validate:
        validate_config(cfg)
    return cfg


PRESET_GROUPS = ("experiment", "debug")  # slots of train.yaml's defaults: no ``+``
MISSING_OPTION = re.compile(r"Could not find '(?P<path>[^']+)'")
NO_OVERRIDE = re.compile(r"Could not override '(?P<key>[^']+)'")


def check_preset_syntax(overrides: list[str]) -> None:
    """``+experiment=NAME`` worked before train.yaml had an ``experiment`` slot; Hydra now
    answers it with "Multiple values for experiment": say what to type instead."""
    for override in overrides:
        name, _, option = override.partition("=")
        if name.lstrip("+") in PRESET_GROUPS and name.startswith("+"):
            group = name.lstrip("+")
            raise ConfigError(f"{override}: drop the + ({group}={option})")


def _missing_option_message(err: Exception) -> str | None:
    """``train_type=nope is not an option (choose from online_grpo, online_ppo)``."""
    text = str(err)
    match = MISSING_OPTION.search(text)
    if match is None:
        return None
    group, _, option = match["path"].rpartition("/")
    _, _, listed = text.partition(f"Available options in '{group}':")
    listed = listed.partition("Config search path")[0]  # Hydra's list ends there
    options = [line.strip() for line in listed.splitlines() if line.startswith("\t")]
    choices = f" (choose from {', '.join(options)})" if options else ""
    return f"{group}={option} is not an option{choices}"


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def compose_error_message(err: Exception, overrides: list[str]) -> str:
    """One line for an error Hydra raised composing ``overrides`` (its own text spans lines
    and, for an unknown key, suggests ``+key=value``, which would only hide the typo)."""
    from astrai.config.keys import known_keys, unknown_key_message

    missing = _missing_option_message(err)
    if missing is not None:
        return missing
    match = NO_OVERRIDE.match(str(err))
    if match is not None:
        key = match["key"]
        others = [o for o in overrides if o.partition("=")[0].lstrip("+~") != key]
        try:  # the keys the other overrides compose (their group choices decide the schema)
            known = known_keys(compose_train_config(others, validate=False))
        except Exception:
            known = known_keys(compose_train_config([], validate=False))
        return unknown_key_message(key, known)
    message = _first_line(err)
    cause = err.__cause__
    if cause is not None and _first_line(cause) not in message:
        message = f"{message}: {_first_line(cause)}"
    return message.removeprefix("Error merging override ")


def check_overrides(overrides: list[str]) -> None:
    """Compose ``overrides`` as ``python train.py`` would and raise one-line ``ConfigError``s
    for what Hydra rejects (unknown keys and options, wrong types, bad syntax) and for keys no
    schema defines; the cross-field checks stay with ``validate_config``."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from astrai.config.keys import check_known_keys

    check_preset_syntax(overrides)
    try:
        cfg = compose_train_config(overrides, validate=False)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(compose_error_message(err, overrides)) from err
    check_known_keys(cfg)
