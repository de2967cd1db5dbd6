"""A reward group that an environment leaves unused (issue 58), refused in one line.

Under ``env=...`` the environment scores its episodes (each turn's reward, the final one, its
``solved`` metric); of the ``reward`` node only ``accuracy_threshold`` is read (an episode whose
environment reports no ``solved`` counts as correct at that reward). A reward group other than
the default on such a run (``experiment=calculator reward=math``) would score nothing while
the command line says it does, so ``check_env_reward`` refuses it, naming the group: the
default group with its keys changed (``reward.accuracy_threshold=0.5``) is the way to set the
threshold.

The group is told from the composed config, which is what every entry point validates (Hydra's
runtime choices exist only inside ``@hydra.main``, not for the compose API of the pre-run check
and the tests): the ``reward`` node's ``_target_`` (or its ``terms``, ``reward=weighted``)
against the default group's file, the option named by ``conf/train.yaml``'s defaults list.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from astrai.config.errors import ConfigError
from astrai.paths import CONFIG_DIR


@functools.cache
def default_reward_group() -> str:
    """The ``reward`` option ``conf/train.yaml``'s defaults list selects (``partial``)."""
    defaults = OmegaConf.to_container(OmegaConf.load(Path(CONFIG_DIR) / "train.yaml").defaults)
    assert isinstance(defaults, list)
    [name] = [d["reward"] for d in defaults if isinstance(d, dict) and "reward" in d]
    return str(name)


@functools.cache
def reward_group_targets() -> dict[str, Any]:
    """Each ``conf/reward/`` option's ``_target_`` (None for ``weighted``, made of ``terms``)."""
    targets = {}
    for path in sorted((Path(CONFIG_DIR) / "reward").glob("*.yaml")):
        option = OmegaConf.load(path)
        assert isinstance(option, DictConfig)
        targets[path.stem] = option.get("_target_")
    return targets


def reward_group_name(reward: DictConfig) -> str:
    """The ``conf/reward/`` option a composed ``reward`` node comes from, as far as its
    ``_target_`` (or ``terms``) tells; ``custom (reward._target_=<target>)`` when no option
    has it."""
    if "terms" in reward:
        return "weighted"
    if OmegaConf.is_missing(reward, "_target_"):
        return "custom"
    target = reward.get("_target_")
    default = default_reward_group()
    targets = reward_group_targets()
    if targets.get(default) == target:  # the default first: options may share a target
        return default
    named = [name for name, option in targets.items() if option == target and name != "custom"]
    return named[0] if named else f"custom (reward._target_={target})"


def check_env_reward(cfg: DictConfig) -> None:
    """``ConfigError`` (one line) for a run with an environment whose ``reward`` group is not
    the default one (module docstring); nothing for ``env=single_turn``."""
    env = cfg.get("env")
    if env is None or OmegaConf.is_missing(env, "_target_") or env.get("_target_") is None:
        return  # no environment (a missing _target_ is validate_env's to name)
    target = env["_target_"]
    chosen, default = reward_group_name(cfg.reward), default_reward_group()
    if chosen == default:
        return
    raise ConfigError(
        f"reward={chosen} is not used with env={target}: the environment scores its episodes "
        f"(its rewards and its solved metric); leave reward at its default ({default}), whose "
        "accuracy_threshold counts an episode without a solved metric as correct"
    )
