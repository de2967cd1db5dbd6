"""Checks of the ``env`` node (``rollout.episodes.env_spec``): the environment class and its
arguments, the episode limits, a tool-call format the run can read, an engine that continues from
token prefixes, a chat template that keeps earlier turns as they were (``template_problem``) and an
environment that opens an episode from this task's rows, the same way twice: two fresh
environments built and reset within the limits, in worker slots as at run time (an ``async def
reset`` awaited, a hang timed out), so a nondeterministic opening is refused here rather than met
mid-run. Each problem is one ``ConfigError`` naming the key (exit 2)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from astrai.config.collector_checks import configured_collector
from astrai.config.env_reward import check_env_reward
from astrai.config.errors import ConfigError
from astrai.envs.base import Message
from astrai.envs.hosts import HostCall, HostPool, call_hosts
from astrai.envs.tool_limits import Limited
from astrai.envs.values import BadValue, checked_messages
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.engines.engine import Engine
from astrai.rollout.episodes.env_spec import EnvSpec, env_spec
from astrai.rollout.episodes.rollout import environment_tools, task_row
from astrai.rollout.episodes.text import episode_text
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
    """``env`` against the run: see the module docstring; first the collector that plays its
    episodes, or none (``config.collector_checks``)."""
    spec = configured_env(cfg.env)
    configured_collector(cfg.get("collector"), spec)
    if spec is None:
        return
    check_env_reward(cfg)  # a reward group the environment would leave unused: refused
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
    pool = HostPool(spec.workers)  # two slots serve every check: two worker starts at most
    try:
        _check_openings(cfg, tokenizer, task, spec, pool)
    finally:
        pool.close()


def _check_openings(
    cfg: DictConfig, tokenizer: Tokenizer, task: ProblemSource, spec: EnvSpec, pool: HostPool
) -> None:
    """The tools, the template with them, and each checked row opened twice (module
    docstring), in ``pool``'s slots."""
    try:
        tools = environment_tools(spec, pool)  # builds one in a slot: the constructor, in limits
    except ValueError as err:
        raise ConfigError(f"env: {_line(err)}") from None
    try:
        episode_text(tokenizer, spec, tools)
    except ValueError as err:
        raise ConfigError(f"env: {_line(err)}") from None
    for problem in (*task.train_problems(cfg.seed, 0, 1), *task.eval_problems(1)):
        where = f"env: {spec.target}.reset of task={task.name}'s row {problem.text!r}"
        first, second = _two_openings(spec, task_row(problem), where, pool)
        if first != second:
            raise ConfigError(
                f"{where} returned different messages on two calls ({_difference(first, second)}): "
                "the G episodes of a group share their opening, so reset(row) must return the "
                "same messages for the same row (seed any randomness from the row)"
            )


def _two_openings(
    spec: EnvSpec, row: dict[str, Any], where: str, pool: HostPool
) -> list[list[Message]]:
    """The opening messages of two fresh environments for ``row``, each built and reset in a
    slot of ``pool`` within the limits (an ``async def reset`` awaited, a hang timed out);
    ``ConfigError`` starting with ``where`` for a failure or a value that is not messages."""
    timeout = spec.limits.step_timeout_s
    hosts = pool.hosts(2)
    made = call_hosts([HostCall(h, "make", (spec.cls, spec.kwargs), timeout) for h in hosts], 2)
    _raise_failed(made, where.replace(".reset of", "() for"))
    opened = call_hosts([HostCall(h, "reset", (row,), timeout) for h in hosts], 2)
    _raise_failed(opened, where)
    try:
        return [checked_messages(outcome.value, "reset()") for outcome in opened]
    except BadValue as err:
        raise ConfigError(f"{where}: {err}") from None


def _raise_failed(outcomes: list[Limited], where: str) -> None:
    for outcome in outcomes:
        if outcome.error is not None:
            raise ConfigError(f"{where}: {outcome.error}")


def _difference(first: list[Message], second: list[Message]) -> str:
    """Where two openings differ, in a few words."""
    if len(first) != len(second):
        return f"{len(first)} messages, then {len(second)}"
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        if a != b:
            return (
                f"message {i}: {str(a.get('content'))[:40]!r} then {str(b.get('content'))[:40]!r}"
            )
    return "equal"


def _line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__
