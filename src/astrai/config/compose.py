"""``conf/train.yaml`` composed outside ``python train.py`` (tests, benchmarks, the CLIs), and
the check ``python train.py`` runs on its overrides before Hydra starts a job."""

from __future__ import annotations

import dataclasses
import difflib
import re
import threading

from omegaconf import DictConfig, OmegaConf

from astrai.config.errors import ConfigError, first_line
from astrai.config.logger_checks import unknown_logger_message, unselected_logger_message
from astrai.config.override_syntax import lexer_error_message

# Hydra's compose API keeps its state in one process-wide ``GlobalHydra``: a second compose
# while one runs (another thread's ``astrai.compose`` or ``fit``) failed with "GlobalHydra is
# already initialized". Composing takes a fraction of a second: one at a time.
_HYDRA_STATE = threading.RLock()


def compose_train_config(overrides: list[str] | None = None, validate: bool = True) -> DictConfig:
    """The config ``python train.py overrides...`` would run, validated like it unless
    ``validate`` is False; raises Hydra's errors for unknown groups or keys. Safe to call from
    several threads (one composes at a time)."""
    from hydra import compose, initialize_config_dir

    from astrai.config.store import register_configs
    from astrai.config.validate import validate_config
    from astrai.paths import CONFIG_DIR

    with _HYDRA_STATE:
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
    """``train_type=nope is not an option (choose from online_grpo, online_ppo)``; a close
    option (a typo) is named first: ``train_type=online_grp is not an option (did you mean
    train_type=online_grpo? choose from online_grpo, online_ppo)``."""
    text = str(err)
    match = MISSING_OPTION.search(text)
    if match is None:
        return None
    group, _, option = match["path"].rpartition("/")
    _, _, listed = text.partition(f"Available options in '{group}':")
    listed = listed.partition("Config search path")[0]  # Hydra's list ends there
    options = [line.strip() for line in listed.splitlines() if line.startswith("\t")]
    close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
    typo = f"did you mean {group}={close[0]}? " if close else ""
    choices = f" ({typo}choose from {', '.join(options)})" if options else ""
    return f"{group}={option} is not an option{choices}"


def compose_error_message(err: Exception, overrides: list[str]) -> str:
    """One line for an error Hydra raised composing ``overrides`` (its own text spans lines
    and, for an unknown key, suggests ``+key=value``, which would only hide the typo)."""
    from astrai.config.keys import known_keys, unknown_key_message

    syntax = lexer_error_message(err, overrides)  # é or a newline in an unquoted value
    if syntax is not None:
        return syntax
    missing = _missing_option_message(err)
    if missing is not None:
        return missing
    match = NO_OVERRIDE.match(str(err))
    if match is not None:
        key = match["key"]
        others = [o for o in overrides if o.partition("=")[0].lstrip("+~") != key]
        try:  # the keys the other overrides compose (their group choices decide the schema)
            base = compose_train_config(others, validate=False)
        except Exception:
            base = compose_train_config([], validate=False)
        # ``infra.environment={K:v}``: the key exists, the one it adds (``K``) does not
        new_key = getattr(err.__cause__, "full_key", None) or key
        new_key = new_key if new_key.startswith(f"{key}.") else key
        parent = new_key.rpartition(".")[0]
        if parent and _is_open_map(base, parent):
            override = next(o for o in overrides if o not in others)
            return _new_key_message(override, new_key, known_keys(base))
        return unknown_key_message(new_key, known_keys(base))
    message = first_line(err)
    cause = err.__cause__
    if cause is not None and first_line(cause) not in message:
        message = f"{message}: {first_line(cause)}"
    return message.removeprefix("Error merging override ")


def _new_key_message(override: str, key: str, known: list[str]) -> str:
    """``override`` sets ``key``, which its open map (``parent``) does not hold yet: Hydra adds
    it only with ``+``. A close sibling (a typo of a key the map has) is named too."""
    from astrai.config.foreign_names import foreign_name, foreign_name_hint

    parent, _, name = key.rpartition(".")
    siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == parent]
    close = difflib.get_close_matches(name, siblings, n=1, cutoff=0.75)
    foreign = foreign_name(name)  # a TRL or verl name (learning_rate): astrai's key
    typo = f"did you mean {parent}.{close[0]}? A" if close else "a"
    if not close and foreign is not None:
        typo = f"{foreign_name_hint(*foreign)}. A"
    return f"{override} adds the key {name} to {parent}: {typo} new key needs + (+{override})"


def _is_open_map(cfg: DictConfig, key: str) -> bool:
    """True when ``key`` is a map that takes any key, added with ``+`` (``infra.environment``,
    an optimizer's keyword arguments, the reward node's constructor arguments)."""
    from astrai.config.keys import OPEN_NODES

    node = OmegaConf.select(cfg, key, default=None)
    if not isinstance(node, DictConfig):
        return False
    return key in OPEN_NODES or not dataclasses.is_dataclass(OmegaConf.get_type(node))


def check_overrides(overrides: list[str]) -> DictConfig:
    """Compose ``overrides`` as ``python train.py`` would and raise one-line ``ConfigError``s
    for what Hydra rejects (unknown keys and options, wrong types, bad syntax) and for keys no
    schema defines; the cross-field checks stay with ``validate_config``. Returns the composed,
    unvalidated config."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from astrai.config.keys import check_known_keys

    check_preset_syntax(overrides)
    try:
        cfg = compose_train_config(overrides, validate=False)
    except (HydraException, OmegaConfBaseException) as err:
        # a logger list's unknown option: Hydra's own error does not list the loggers
        unknown = unknown_logger_message(overrides)
        raise ConfigError(unknown or compose_error_message(err, overrides)) from err
    except AssertionError as err:  # OmegaConf's, for a key set under a null node
        unselected = unselected_logger_message(overrides)
        if unselected is None:
            raise
        raise ConfigError(unselected) from err
    check_known_keys(cfg)
    return cfg


def check_run_config(overrides: list[str], docker_as_container: bool = False) -> DictConfig:
    """What ``python train.py overrides...`` checks before its run starts, in-process: the
    overrides (``check_overrides``), then ``validate_config``; ``ConfigError`` otherwise.
    ``docker_as_container``: an ``infra=docker`` job is validated as the Docker launcher
    validates it (``where="container"``)."""
    from astrai.config.validate import validate_config

    cfg = check_overrides(overrides)
    docker = docker_as_container and cfg.infra.name == "docker"
    validate_config(cfg, "container" if docker else "host")
    return cfg


MAX_CHECKED_SWEEP_JOBS = 32  # jobs a multirun's pre-check composes at most (~0.3 s each)


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """Jobs of the ``-m`` sweep ``overrides`` that between them hold every swept value once
    (job ``i`` takes value ``i`` of each swept key, the first value when a key has fewer),
    at most ``MAX_CHECKED_SWEEP_JOBS``. Hydra's parse errors are ``ConfigError``s."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        values: list[list[str]] = []
        for override in parsed:
            key = override.get_key_element()
            if override.is_discrete_sweep():
                values.append([f"{key}={v}" for v in override.sweep_string_iterator()])
            elif override.is_sweep_override():  # an interval: another sweeper's to sample
                continue
            else:
                values.append([f"{key}={override.get_value_element_as_str()}"])
    except HydraException as err:
        raise ConfigError(lexer_error_message(err, overrides) or first_line(err)) from err
    count = min(max((len(v) for v in values), default=1), MAX_CHECKED_SWEEP_JOBS)
    return [[v[i] if i < len(v) else v[0] for v in values] for i in range(count)]


def check_sweep_overrides(overrides: list[str]) -> None:
    """``check_run_config`` for the jobs of a ``-m`` sweep (``sweep_jobs``): an unknown key or
    option, a wrong type or a value out of range in any swept value is one line before the
    first job starts (and its sweep dir is made). A job for ``infra=docker`` is validated as
    the Docker launcher validates it (``where="container"``)."""
    for job in sweep_jobs(overrides):
        check_run_config(job, docker_as_container=True)
