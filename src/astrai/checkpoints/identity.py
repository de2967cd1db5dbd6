"""What a checkpoint is: its step, and the fingerprint of the setup that wrote it.

One check, shared by resume (``training.checkpointing``) and ``python -m astrai.checkpoints
verify``, so the two never disagree: ``trainer_state.json``'s step must equal the ``step_<N>``
directory name and lie in ``0 <= step <= total_steps``, and on resume the fingerprint (what must
not change across a resume: train type, model architecture, task, seed, world size, parallelism,
device type)
must equal the current run's, except for the keys the run allows to change
(``ckpt.allow_changes``). ``total_steps`` is not in the fingerprint: a longer run is a normal
resume.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from astrai.checkpoints.layout import (
    ADAPTER_CONFIG_FILE,
    ADAPTERS_KEY,
    RUN_CONFIG_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    parse_step,
)
from astrai.models.families import implied_by_older_fields

# ``ckpt.allow_changes`` names these keys; ``model`` and ``task`` are dicts of their fields
# ``adapters``: a LoRA run's settings and its base model's SHA-256 (absent in a full run's)
# ``teacher``: distill=opd's teachers, each {path, sha256} (absent without distillation); their
# paths may change, their weights may not
FINGERPRINT_KEYS = (
    "train_type",
    "model",
    "task",
    "seed",
    "world_size",
    "parallel",
    "device",
    "adapters",
    "teacher",
)
# keys only some runs record: absent from a checkpoint is "none", not "written before"
_OPTIONAL_KEYS = frozenset({"adapters", "teacher"})
# fields of the model config that do not change what a checkpoint's weights mean
_NOT_ARCHITECTURE = frozenset({"initializer_range", "gradient_checkpointing"})


def model_fingerprint(model_fields: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture fields of a model config (``LlamaConfig`` fields as a dict). A field
    added since (issue 33's ``head_dim``, ``qk_norm``, ...) is left out while it holds what a
    config without it meant, so a run fingerprinted before it still resumes."""
    implied = implied_by_older_fields(model_fields)
    return {
        k: v
        for k, v in sorted(model_fields.items())
        if k not in _NOT_ARCHITECTURE and not (k in implied and implied[k] == v)
    }


def check_step(checkpoint: Path, state: Mapping[str, Any], total_steps: int | None) -> int:
    """``state["step"]`` as an int, or a ``CheckpointError`` naming ``trainer_state.json``.

    The step must be an integer, equal the ``step_<N>`` directory's N (a directory with another
    name, e.g. a copy, is not compared), and lie in ``0 <= step <= total_steps`` (no upper bound
    when ``total_steps`` is None).
    """
    where = checkpoint / TRAINER_STATE_FILE
    step = state.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointError(f"{where}: missing or invalid 'step' ({step!r})")
    if step < 0:
        raise CheckpointError(f"{where}: step {step} is negative")
    named = parse_step(checkpoint.name)
    if named is not None and named != step:
        raise CheckpointError(
            f"{where}: step {step} does not match its directory {checkpoint.name}"
        )
    if total_steps is not None and step > total_steps:
        raise CheckpointError(f"{where}: step {step} is beyond trainer.total_steps={total_steps}")
    return step


def saved_fingerprint(state: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """(fingerprint, complete): the one ``trainer_state.json`` records, or for a checkpoint
    written before fingerprints were saved, what its older fields say (train type, world size,
    parallelism) and ``complete=False``."""
    recorded = state.get("fingerprint")
    if isinstance(recorded, dict):
        return dict(recorded), True
    legacy = {
        "train_type": state.get("train_type"),
        "world_size": state.get("world_size", 1),
        "parallel": state.get("parallel", "ddp"),
    }
    return {k: v for k, v in legacy.items() if v is not None}, False


def _flatten(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for sub in sorted(value):
            flat.update(_flatten(f"{key}.{sub}", value[sub]))
        return flat or {key: {}}
    return {key: value}


def _differences(saved: Mapping[str, Any], current: Mapping[str, Any], key: str) -> list[str]:
    """``key.sub=old, this run new`` for each differing leaf of ``saved[key]``/``current[key]``."""
    old, new = _flatten(key, saved.get(key)), _flatten(key, current.get(key))
    unset = "(unset)"
    return [
        f"{name}={json.dumps(old.get(name, unset))}, this run {json.dumps(new.get(name, unset))}"
        for name in sorted(set(old) | set(new))
        if old.get(name, unset) != new.get(name, unset)
    ]


def _without_paths(fingerprint: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``fingerprint`` with the teachers' paths left out of ``teacher`` (a moved teacher with
    the same weights resumes)."""
    teachers = fingerprint.get(key)
    if key != "teacher" or not isinstance(teachers, Mapping):
        return fingerprint
    hashes = {
        name: {k: v for k, v in entry.items() if k != "path"}
        if isinstance(entry, Mapping)
        else entry
        for name, entry in teachers.items()
    }
    return {**fingerprint, key: hashes}


def check_allow_changes(allow: Iterable[str]) -> set[str]:
    """``ckpt.allow_changes`` as a set; an unknown key is a ``CheckpointError``."""
    allowed = {str(key) for key in allow}
    unknown = sorted(allowed - set(FINGERPRINT_KEYS))
    if unknown:
        raise CheckpointError(
            f"ckpt.allow_changes: unknown key(s) {', '.join(unknown)} "
            f"(choose from {', '.join(FINGERPRINT_KEYS)})"
        )
    return allowed


def check_same_base(
    checkpoint: Path, saved: Any, current: Any, where: str = "this run's base"
) -> None:
    """A LoRA checkpoint's adapters on another base model (its weights' SHA-256 differs from
    the recorded one): one line naming both. The one refusal of resume (``current``: this
    run's base), ``verify`` and ``export`` (the base the checkpoint records, ``where``)."""
    if not (isinstance(saved, Mapping) and isinstance(current, Mapping)):
        return
    old, new = saved.get("base_sha256"), current.get("base_sha256")
    if old != new:
        raise CheckpointError(
            f"{checkpoint / TRAINER_STATE_FILE}: checkpoint {checkpoint.name}'s adapters were "
            f"trained on another base model (recorded weights SHA-256 {str(old)[:16]}..., "
            f"{where} {str(new)[:16]}...): point model.path at the base the run started from"
        )


# adapter_config.json's keys (PEFT's LoraConfig) -> the ``model.lora`` setting each must equal
_ADAPTER_CONFIG_KEYS = {
    "r": "rank",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "use_rslora": "use_rslora",
    "use_dora": "use_dora",
}


def adapter_config_problem(checkpoint: Path, state: Mapping[str, Any]) -> str | None:
    """A LoRA checkpoint whose ``adapter_config.json`` disagrees with the adapters' trained
    state (``trainer_state.json``'s ``adapters``: the ``model.lora`` settings they were trained
    with and the base's path): one line naming the file and each differing key; None when they
    agree, for a full fine-tuning checkpoint, or where a file is unreadable (said elsewhere).
    Resume, ``verify`` and ``export --adapter`` refuse it: PEFT loads adapters by that file."""
    adapters = state.get(ADAPTERS_KEY)
    lora = adapters.get("lora") if isinstance(adapters, Mapping) else None
    if not isinstance(lora, Mapping):
        return None
    file = checkpoint / ADAPTER_CONFIG_FILE
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError):
        return None  # missing or unreadable: completeness names it
    if not isinstance(config, dict):
        return f"{file}: expected a JSON object"
    unset = "(unset)"
    differences = [
        f"{key}={json.dumps(config.get(key, unset))} (trained with model.lora.{setting}="
        f"{json.dumps(lora.get(setting))})"
        for key, setting in _ADAPTER_CONFIG_KEYS.items()
        if config.get(key, unset) != lora.get(setting)
    ]
    targets = lora.get("target_modules")
    if isinstance(targets, list) and sorted(set(targets)) != sorted(
        config.get("target_modules") or []
    ):
        differences.append(
            f"target_modules={json.dumps(config.get('target_modules'))} (trained with "
            f"model.lora.target_modules={json.dumps(targets)})"
        )
    base = adapters.get("base") if isinstance(adapters, Mapping) else None
    path = base.get("path") if isinstance(base, Mapping) else None
    if config.get("base_model_name_or_path", unset) != path:
        differences.append(
            f"base_model_name_or_path={json.dumps(config.get('base_model_name_or_path', unset))}"
            f" (trained on {json.dumps(path)})"
        )
    if config.get("peft_type", "LORA") != "LORA":
        differences.append(f"peft_type={json.dumps(config.get('peft_type'))} (trained as LORA)")
    if not differences:
        return None
    return (
        f"{file}: disagrees with the adapters' trained state in {TRAINER_STATE_FILE}: "
        f"{'; '.join(differences)} (restore the file as the run wrote it)"
    )


def check_fingerprint(
    checkpoint: Path,
    state: Mapping[str, Any],
    current: Mapping[str, Any],
    allow: Iterable[str] = (),
) -> str | None:
    """Refuse (``CheckpointError``, one line naming every differing key with both values) a
    checkpoint whose fingerprint differs from ``current`` in a key not in ``allow``.

    Returns a one-line warning for a checkpoint written before fingerprints were saved (only
    its train type, world size and parallelism can be compared), else None.
    """
    allowed = check_allow_changes(allow)
    saved, complete = saved_fingerprint(state)
    if "adapters" not in allowed:
        check_same_base(checkpoint, saved.get("adapters"), current.get("adapters"))
    problems: list[str] = []
    for key in FINGERPRINT_KEYS:
        if key in allowed or (key not in saved and not (complete and key == "teacher")):
            continue
        problems.extend(_differences(_without_paths(saved, key), _without_paths(current, key), key))
    if problems:
        keys = sorted({p.split("=", 1)[0].split(".", 1)[0] for p in problems})
        raise CheckpointError(
            f"{checkpoint / TRAINER_STATE_FILE}: checkpoint {checkpoint.name} was written by a "
            f"different setup: {'; '.join(problems)} (resume with the same settings, or allow a "
            f"deliberate change with ckpt.allow_changes=[{','.join(keys)}])"
        )
    if complete:
        return None
    # ``adapters`` is absent from every full fine-tuning run's fingerprint: nothing unchecked
    unchecked = [key for key in FINGERPRINT_KEYS if key not in saved and key not in _OPTIONAL_KEYS]
    return (
        f"{checkpoint / TRAINER_STATE_FILE}: written before astrai recorded a fingerprint; "
        f"{', '.join(unchecked)} not checked against this run"
    )


def recorded_total_steps(checkpoint: Path, state: Mapping[str, Any]) -> int | None:
    """The ``trainer.total_steps`` of the run that wrote ``checkpoint`` (trainer_state.json,
    else its ``config.yaml``); None when neither says."""
    total = state.get("total_steps")
    if isinstance(total, int) and not isinstance(total, bool):
        return total
    try:
        config = yaml.safe_load((checkpoint / RUN_CONFIG_FILE).read_text())
        total = config["trainer"]["total_steps"]
    except (OSError, KeyError, TypeError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


def check_checkpoint_identity(
    checkpoint: Path,
    state: Any,
    total_steps: int | None,
    current: Mapping[str, Any] | None = None,
    allow: Iterable[str] = (),
) -> str | None:
    """The one identity check of resume and ``verify``: the step (``check_step``) and, when
    ``current`` is given (resume), the fingerprint (``check_fingerprint``).

    Args:
        checkpoint: the ``step_<N>`` directory.
        state: the parsed ``trainer_state.json``.
        total_steps: the run's ``trainer.total_steps`` (resume: this run's; verify: the
            checkpoint's own), None for no upper bound.
        current: this run's fingerprint (``FINGERPRINT_KEYS``), None to skip the comparison.
        allow: fingerprint keys allowed to differ (``ckpt.allow_changes``).

    Returns:
        A one-line warning for a checkpoint without a saved fingerprint, else None.
    """
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{checkpoint / TRAINER_STATE_FILE}: expected a JSON object")
    check_step(checkpoint, state, total_steps)
    if current is None:
        return None
    return check_fingerprint(checkpoint, state, current, allow)
