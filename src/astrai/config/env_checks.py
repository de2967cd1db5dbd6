"""Checks of the ``env`` node (``rollout.env_spec``): the environment class and its arguments,
the episode limits, a tool-call format the run can read, an engine that continues from token
prefixes, a chat template that keeps earlier turns as they were (``template_problem``) and an
environment that opens an episode from this task's rows. Each problem is one ``ConfigError``
naming the key (exit 2)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from astrai.config.errors import ConfigError
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.engine import Engine
from astrai.rollout.env_spec import EnvSpec, env_spec
from astrai.rollout.episode_rollout import task_row
from astrai.rollout.episode_text import episode_text
from astrai.tasks.base import ProblemSource


def configured_env(node: Any) -> EnvSpec | None:
    """The ``env`` node as an ``EnvSpec`` (None: ``env=single_turn``); ``ConfigError`` naming
    the key."""
    try:
        plain = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    except OmegaConfBaseException as err:  # an interpolation (${task.max_number}) with no target
        raise ConfigError(f"{err.full_key or 'env'}: {str(err).splitlines()[0]}") from None
    if plain is not None and not isinstance(plain, dict):
        raise ConfigError(
            f"env must be a config node (env=single_turn, calculator, ...), not {plain!r}"
        )
    try:
        return env_spec(plain)  # type: ignore[arg-type]  # a dict of str keys: composed YAML
    except ValueError as err:
        raise ConfigError(str(err)) from None


def validate_env(
    cfg: DictConfig, tokenizer: Tokenizer, task: ProblemSource, engine: type[Engine]
) -> None:
    """``env`` against the run: see the module docstring."""
    spec = configured_env(cfg.env)
    if spec is None:
        return
    if cfg.infra.get("parallel") == "fsdp":
        raise ConfigError(
            f"env={spec.target} with infra.parallel=fsdp is not built: a sharded policy decodes "
            "in lockstep over the ranks, and each rank's episodes end at their own turns "
            "(use infra.parallel=ddp)"
        )
    if not engine.supports_prefix_continuation:
        raise ConfigError(
            f"env={spec.target}: engine={engine.name} cannot continue an episode from its "
            "tokens (engine=torch or engine=vllm can)"
        )
    try:
        env = spec.make()
    except Exception as err:  # noqa: BLE001 (a user's constructor)
        raise ConfigError(f"env: {spec.target}(): {_line(err)}") from None
    try:
        episode_text(tokenizer, spec, env.tools())
    except ValueError as err:
        raise ConfigError(f"env: {_line(err)}") from None
    for problem in (*task.train_problems(cfg.seed, 0, 1), *task.eval_problems(1)):
        try:
            spec.make().reset(task_row(problem))
        except Exception as err:  # noqa: BLE001 (a user's environment)
            raise ConfigError(
                f"env: {spec.target}.reset of task={task.name}'s row {problem.text!r}: {_line(err)}"
            ) from None


def _line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__
