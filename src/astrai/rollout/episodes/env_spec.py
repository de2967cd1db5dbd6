"""The ``env`` node read into what the episode runner needs (``EnvSpec``): the environment class
(``env._target_``, an import path like a custom reward's), its constructor's keyword arguments
(the node's other keys), the tool-call format (``env.parser``), where the environment's code
runs (``env.workers``: ``process``, one worker process per episode slot, or ``thread``;
``envs.hosts``) and the episode's limits.

``env=single_turn`` (``_target_: null``, the default) is no environment: today's one-answer
rollouts, bit for bit (``env_spec`` returns None). Every problem is a ``ValueError`` of one
line naming the key; the config layer turns it into a ``ConfigError`` (exit 2).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from astrai.envs.base import Environment
from astrai.envs.calculator import parse_calc_line
from astrai.envs.hosts import check_mode
from astrai.envs.tool_calls import PARSERS, STOP_STRINGS, ParsedTurn
from astrai.imports import import_target
from astrai.rollout.episodes.observation_limit import TRUNCATION_SIDES
from astrai.rollout.episodes.runner import EpisodeLimits

SINGLE_TURN = "single_turn"


def parse_content_only(text: str) -> ParsedTurn:
    """No tool-call format: the whole turn is its content."""
    return ParsedTurn(content=text.strip())


# every format an environment may name in ``env.parser``, with its stop strings
TURN_PARSERS: dict[str, Callable[[str], ParsedTurn]] = {
    **PARSERS,
    "calc_line": parse_calc_line,
    "none": parse_content_only,
}
TURN_STOP_STRINGS: dict[str, list[str]] = {**STOP_STRINGS, "calc_line": [], "none": []}
_LIMIT_KEYS = {f.name for f in fields(EpisodeLimits)}
ENV_KEYS = frozenset({"_target_", "parser", "workers", *_LIMIT_KEYS})


@dataclass(frozen=True)
class EnvSpec:
    """What the episode runner builds each episode from: ``cls(**kwargs)``, turns read with
    ``parser`` (a ``TURN_PARSERS`` name), within ``limits``, run in hosts of ``workers``
    (``process`` or ``thread``: ``envs.hosts``)."""

    cls: type[Environment]
    target: str
    parser: str
    limits: EpisodeLimits
    kwargs: dict[str, Any] = field(default_factory=dict)
    workers: str = "process"

    def make(self) -> Environment:
        """A fresh environment for one episode."""
        return self.cls(**self.kwargs)

    def parse(self, text: str) -> ParsedTurn:
        return turn_parser(self.parser)(text)

    @property
    def user_parser(self) -> bool:
        """Whether ``parser`` is a user's function (run within the limits, like the
        environment), not one of astrai's ``TURN_PARSERS``."""
        return self.parser not in TURN_PARSERS

    @property
    def stop_strings(self) -> list[str]:
        return TURN_STOP_STRINGS.get(self.parser, [])


def turn_parser(name: str) -> Callable[[str], ParsedTurn]:
    """``env.parser``: a ``TURN_PARSERS`` name, or ``module.function`` (importable like the
    environment: text -> ``ParsedTurn``); ``ValueError`` naming the key otherwise."""
    if name in TURN_PARSERS:
        return TURN_PARSERS[name]
    if "." not in name:
        raise ValueError(
            f"env.parser={name!r} is not one of {', '.join(TURN_PARSERS)} nor a module.function"
        )
    parser = import_target(name, "env.parser")
    if not callable(parser):
        raise ValueError(f"env.parser {name!r} is not a function (text -> ParsedTurn)")
    return parser  # type: ignore[no-any-return]


def environment_class(target: object) -> type[Environment]:
    """The class ``env._target_`` names (``module.Class``, importable from the working
    directory or ``PYTHONPATH``); ``ValueError`` naming the key otherwise."""
    return import_target(  # type: ignore[no-any-return]
        target,
        "env._target_",
        Environment,
        "an astrai.envs.Environment subclass (reset(row) -> messages, step(turn) -> StepResult;"
        " an agent function is env=agent env.agent=module.function)",
    )


def env_spec(node: Mapping[str, Any] | None) -> EnvSpec | None:
    """The ``env`` node as an ``EnvSpec``; None for ``env=single_turn`` (no ``_target_``)."""
    if node is None or node.get("_target_") is None:
        return None
    cls = environment_class(node["_target_"])
    parser = node.get("parser", "none")
    if not isinstance(parser, str):
        raise ValueError(f"env.parser must be a name or module.function (got {parser!r})")
    turn_parser(parser)
    workers = node.get("workers", "process")
    check_mode(workers)
    limits = {key: node[key] for key in _LIMIT_KEYS if key in node}
    for key, value in limits.items():
        if key == "observation_truncation_side":
            good = value in TRUNCATION_SIDES
            kind = " or ".join(TRUNCATION_SIDES)
        elif key in ("step_timeout_s", "episode_timeout_s"):
            good = isinstance(value, int | float) and not isinstance(value, bool)
            good = good and math.isfinite(value) and value > 0
            kind = "a positive number of seconds"
        else:
            good = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            kind = "a positive integer"
        if not good:
            raise ValueError(f"env.{key} must be {kind} (got {value!r})")
    kwargs = {str(k): v for k, v in node.items() if k not in ENV_KEYS}
    accepted = inspect.signature(cls).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise ValueError(
                f"env.{unknown[0]} is not an argument of {node['_target_']} "
                f"(its arguments: {', '.join(accepted) or 'none'})"
            )
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as err:
        raise ValueError(f"env: {node['_target_']}({', '.join(kwargs)}): {err}") from None
    return EnvSpec(cls, str(node["_target_"]), parser, EpisodeLimits(**limits), kwargs, workers)
