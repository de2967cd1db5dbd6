"""Checks of the ``engine`` node (``astrai.rollout.engines.engine``): an engine class
(``_target_``), its π_old and correction, its own knobs' values (declared on its ``Config``) and its
own ``check`` of what it needs of the run, before anything starts."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from astrai.algorithms.correction import CORRECTIONS, OLD_LOGPROBS
from astrai.config.errors import ConfigError, require
from astrai.config.ranges import check_number
from astrai.config.schema import EngineConfig, engine_schema
from astrai.models.llama import LlamaConfig
from astrai.policy_lag import AUTO, LagPlan, lag_plan
from astrai.rollout.engines.engine import Engine, EngineJob, engine_class
from astrai.tasks.base import ProblemSource

# ``engine.correction_high``'s ceiling: published bands stop at 5 (TIS and TRL's cap 2, IcePop
# 5); a weight of 1e4 already lets one token outweigh ten thousand others, and a larger float
# overflows the float32 weights (1e300: an overflow traceback mid-step)
MAX_CORRECTION_HIGH = 10_000.0


def validate_engine(
    cfg: DictConfig, model: LlamaConfig, task: ProblemSource, device: str | None
) -> None:
    """``engine``: an engine class (``_target_``), its π_old and correction
    (``validate_correction``), its knobs (``check_knobs``) and the engine's own ``check`` of
    the run: ``device`` (the planned device, None where a container decides), the model, the
    longest request, the processes. Nothing starts here."""
    engine = cfg.engine
    cls = configured_engine(engine)
    validate_correction(lag_plan(cfg))
    check_knobs(cls, engine)
    world = (
        cfg.infra.nproc_per_node * cfg.infra.nnodes
        if isinstance(cfg.infra.nproc_per_node, int)
        else None
    )
    job = EngineJob(
        device=device,
        model=model,
        # an embedded task's longest prompt (BOS included); a dataset's: any that fits
        longest_prompt=1 + task.max_prompt_len() if hasattr(task, "max_prompt_len") else None,
        max_new_tokens=int(cfg.train_type.sampling.max_new_tokens),
        world_size=world,
        parallel=cfg.infra.parallel,
    )
    try:
        cls.check(engine, job)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def configured_engine(node: Mapping[str, Any] | None) -> type[Engine]:
    """The engine class ``engine._target_`` names; a ``ConfigError`` naming the key when it
    cannot be imported or is not an ``Engine``."""
    try:
        return engine_class(node)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def check_knobs(cls: type[Engine], node: Mapping[str, Any]) -> None:
    """The engine's own keys (``cls.Config``'s fields) against what each takes (``knob``: its
    choices or bounds; a bool true or false), and no key the engine does not have (a YAML
    outside ``conf/`` has no schema to catch it at compose time)."""
    own = fields(cls.Config)
    known = {f.name for f in (*fields(EngineConfig), *own)}
    unknown = sorted(str(key) for key in node if key not in known)
    require(
        not unknown,
        f"engine.{unknown[0] if unknown else ''} is not a key of engine={cls.name} (its keys: "
        f"{', '.join(sorted(known))})",
    )
    try:  # the types (a YAML outside conf/ was composed untyped)
        plain = OmegaConf.to_container(node) if isinstance(node, DictConfig) else dict(node)
        OmegaConf.merge(OmegaConf.structured(engine_schema(cls)), plain)
    except OmegaConfBaseException as err:
        reason = str(err).splitlines()[0]
        raise ConfigError(f"engine.{err.full_key or ''}: {reason}") from None
    hints = typing.get_type_hints(cls.Config)
    for knob in own:
        if knob.name not in node:
            continue  # the class's default
        key, value = f"engine.{knob.name}", node[knob.name]
        if "choices" in knob.metadata:
            choices = knob.metadata["choices"]
            require(value in choices, f"{key}={value!r} is not one of {', '.join(choices)}")
        elif "bounds" in knob.metadata:
            check_number(value, key, **knob.metadata["bounds"])
        elif hints[knob.name] is bool:
            require(isinstance(value, bool), f"{key} must be true or false")


def validate_correction(plan: LagPlan) -> None:
    """``engine.old_logprobs``, ``engine.correction`` and its band (``algorithms.correction``)
    as ``plan`` holds them (``astrai.policy_lag.lag_plan``): each a known choice or ``auto``;
    a correction needs the trainer's own π_old, and its band is a floor in [0, 1) and a
    ceiling above 1 (so the weight 1 of no mismatch is always inside), set only where a
    correction reads it."""
    configured = plan.configured
    require(
        configured.old_logprobs in (*OLD_LOGPROBS, AUTO),
        f"engine.old_logprobs={configured.old_logprobs!r} is not one of "
        f"{', '.join((*OLD_LOGPROBS, AUTO))}",
    )
    require(
        configured.correction in (*CORRECTIONS, AUTO),
        f"engine.correction={configured.correction!r} is not one of "
        f"{', '.join((*CORRECTIONS, AUTO))}",
    )
    low, high = configured.correction_low, configured.correction_high
    if plan.correction == "none":
        for key, value in (("correction_low", low), ("correction_high", high)):
            require(
                value is None,
                f"engine.{key}={value} is set but engine.correction=none reads no band",
            )
        return
    require(
        plan.recomputes,
        f"engine.correction={plan.correction} needs engine.old_logprobs=recompute (with "
        "bypass, π_old is the engine's own logprobs: there is no mismatch to correct)",
    )
    check_number(low, "engine.correction_low", 0, 1, high_open=True, optional=True)
    check_number(
        high, "engine.correction_high", 1, MAX_CORRECTION_HIGH, low_open=True, optional=True
    )
