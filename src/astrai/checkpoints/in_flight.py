"""A checkpoint's in-flight rollouts (``in_flight.pt``, ``train_type.max_policy_lag`` > 0): the
one check of resume and ``python -m astrai.checkpoints verify``, so ``verify`` OK means resume
takes them.

The file holds ``{"per_rank": [[record, ...], ...]}``: one list per rank, each as long as
``trainer_state.json``'s ``in_flight`` count, the j-th (0-based) the rollout step ``step + 1 + j``
trains. A record is ``{"step", "rollout", "metrics", "sample_s"}``; ``rollout`` holds every field
of ``astrai.rollout.Rollout`` (``ROLLOUT_FIELDS``; a test pins the two lists equal, as this layer
may not import ``rollout``) with shapes that agree (``[B, P]`` prompts, ``[B, G, R]`` responses,
``[B, G]`` rewards and, where present, ``valid``), finite rewards and finite logprobs on the
response tokens.

Decision: a run resumed with another ``train_type.prompts_per_step`` or ``train_type.group_size``
than its in-flight rollouts were sampled with is refused (naming the key), not trained on the
old-sized rollouts first: the steps they fill would silently train another batch shape than the
config says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import torch
import yaml

from astrai.checkpoints import io
from astrai.checkpoints.layout import (
    IN_FLIGHT_FILE,
    IN_FLIGHT_KEY,
    RUN_CONFIG_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    recorded_extra_files,
)

# ``Rollout``'s fields: (kind, shape) — "BP", "BGR", "BG" name the dimensions that must agree
_REQUIRED_TENSORS = {
    "prompt_ids": "BP",
    "prompt_mask": "BP",
    "response_ids": "BGR",
    "response_mask": "BGR",
    "logprobs": "BGR",
    "rewards": "BG",
    "sample_versions": "BG",  # the staleness guard reads them
}
_OPTIONAL_TENSORS = {
    name: "BGR"
    for name in (
        "ref_logprobs",
        "values",
        "advantages",
        "returns",
        "loss_mask",
        "behaviour_logprobs",
        "is_weights",
        "sampled_mask",
        "token_scores",
        "token_versions",
        "teacher_logprobs",
    )
} | {
    "valid": "BG",  # which responses count in the statistics (None: all)
    # distill=opd's teacher top-k, pinned at prepare (an in-flight rollout holds none)
    "teacher_topk_ids": "BGRK",
    "teacher_topk_logprobs": "BGRK",
}
_OTHER_FIELDS = ("policy_version", "prompts", "responses", "reward_terms", "episode_stats")
ROLLOUT_FIELDS = frozenset({*_REQUIRED_TENSORS, *_OPTIONAL_TENSORS, *_OTHER_FIELDS})
# fields a checkpoint written before multi-turn episodes (issue 50; ``valid``: issue 58;
# ``token_versions``: issue 60; the teacher's: issue 61) does not hold: their defaults (one-turn
# rollouts, every response valid, no per-token versions, no teacher) stand in
_ADDED_FIELDS = frozenset(
    {
        "sampled_mask",
        "token_scores",
        "episode_stats",
        "valid",
        "token_versions",
        "teacher_logprobs",
        "teacher_topk_ids",
        "teacher_topk_logprobs",
    }
)
RECORD_KEYS = frozenset({"step", "rollout", "metrics", "sample_s"})
_BOOL_FIELDS = ("prompt_mask", "response_mask", "loss_mask", "sampled_mask", "valid")
_INT_FIELDS = (
    "prompt_ids",
    "response_ids",
    "sample_versions",
    "token_versions",
    "teacher_topk_ids",
)


@dataclass(frozen=True)
class RunShape:
    """The batch a run samples per step: what its in-flight rollouts must hold.

    Attributes:
        world_size: ranks (one list of rollouts each).
        prompts_per_step: ``train_type.prompts_per_step`` over all ranks (``B`` per rank is
            this over ``world_size``).
        group_size: ``train_type.group_size`` (``G``).
        source: who says so, for the message ("this run's", "its config.yaml's").
    """

    world_size: int
    prompts_per_step: int
    group_size: int
    source: str = "this run's"


def recorded_shape(checkpoint: Path, state: Mapping[str, Any]) -> RunShape | None:
    """The shape of the run that wrote ``checkpoint`` (its ``config.yaml``, its
    ``trainer_state.json``'s world size); None where they do not say."""
    world_size = state.get("world_size")
    try:
        node = yaml.safe_load((checkpoint / RUN_CONFIG_FILE).read_text())["train_type"]
        prompts, group = node["prompts_per_step"], node["group_size"]
    except (OSError, KeyError, TypeError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not (_is_int(world_size) and _is_int(prompts) and _is_int(group)):
        return None
    if min(world_size, prompts, group) < 1:
        return None
    return RunShape(world_size, prompts, group, source=f"its {RUN_CONFIG_FILE}'s")


def check_in_flight_file(
    checkpoint: Path, state: Mapping[str, Any], shape: RunShape | None
) -> list[list[dict[str, Any]]]:
    """Load ``checkpoint``'s ``in_flight.pt`` and check it (``check_in_flight_object``); return
    its per-rank lists of records ([] when ``trainer_state.json`` lists no such file)."""
    if IN_FLIGHT_FILE not in recorded_extra_files(state):
        return []
    file = checkpoint / IN_FLIGHT_FILE
    return check_in_flight_object(io.load_torch(file), state, file, shape)


def check_in_flight_object(
    loaded: Any, state: Mapping[str, Any], file: Path, shape: RunShape | None
) -> list[list[dict[str, Any]]]:
    """``loaded`` (``torch.load`` of ``file``) checked against ``state`` (the checkpoint's
    ``trainer_state.json``) and ``shape`` (None: its rollouts agree with each other only);
    ``CheckpointError`` naming ``file`` and the first thing wrong, else its per-rank lists."""
    per_rank = loaded.get("per_rank") if isinstance(loaded, dict) else None
    if not isinstance(per_rank, list) or not all(isinstance(r, list) for r in per_rank):
        raise CheckpointError(
            f"{file}: not astrai's in-flight rollouts (expected {{'per_rank': [[...], ...]}}, "
            f"found {type(loaded).__name__})"
        )
    count = state.get(IN_FLIGHT_KEY)
    if not _is_int(count) or count < 1:
        raise CheckpointError(
            f"{file.parent / TRAINER_STATE_FILE}: lists {IN_FLIGHT_FILE} but no valid "
            f"{IN_FLIGHT_KEY!r} count ({count!r})"
        )
    ranks = shape.world_size if shape is not None else state.get("world_size", len(per_rank))
    if len(per_rank) != ranks:
        raise CheckpointError(
            f"{file}: in-flight rollouts of {len(per_rank)} rank(s), "
            f"{shape.source if shape else 'trainer_state.json'} world size is {ranks}: they "
            "cannot be shared out again"
        )
    step = state.get("step")
    for rank, records in enumerate(per_rank):
        if len(records) != count:
            raise CheckpointError(
                f"{file}: rank {rank} holds {len(records)} in-flight rollout(s), "
                f"{TRAINER_STATE_FILE} counts {count} (resume would sample the missing steps "
                "afresh: not the run it continues)"
            )
        for ahead, record in enumerate(records):
            where = f"{file}: rank {rank}'s in-flight rollout {ahead}"
            problem = _record_problem(record, step + 1 + ahead if _is_int(step) else None, state)
            if problem is None and shape is not None:
                problem = _shape_problem(record["rollout"], shape)
            if problem is not None:
                raise CheckpointError(f"{where}: {problem}")
    return per_rank


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _record_problem(record: Any, step: int | None, state: Mapping[str, Any]) -> str | None:
    if not isinstance(record, dict) or set(record) != RECORD_KEYS:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        return f"expected the keys {sorted(RECORD_KEYS)}, found {keys}"
    if not _is_int(record["step"]) or (step is not None and record["step"] != step):
        return f"is for step {record['step']!r}, the checkpoint's next steps start at {step}"
    metrics, sample_s = record["metrics"], record["sample_s"]
    if not isinstance(metrics, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) for k, v in metrics.items()
    ):
        return "'metrics' is not a dict of numbers"
    if not isinstance(sample_s, int | float) or not math.isfinite(sample_s):
        return f"'sample_s' is not a number ({sample_s!r})"
    return _rollout_problem(record["rollout"], state)


def _rollout_problem(rollout: Any, state: Mapping[str, Any]) -> str | None:
    """What is wrong with one record's ``rollout`` dict (fields, shapes, dtypes, values)."""
    if not isinstance(rollout, dict):
        return f"'rollout' is a {type(rollout).__name__}, not a dict"
    missing = sorted(ROLLOUT_FIELDS - _ADDED_FIELDS - set(rollout))
    extra = sorted(set(rollout) - ROLLOUT_FIELDS)
    if missing or extra:
        return f"'rollout' fields differ from a Rollout's (missing {missing}, unknown {extra})"
    dims: dict[str, int] = {}
    specs = {**_REQUIRED_TENSORS, **_OPTIONAL_TENSORS}
    for name, spec in specs.items():
        value = rollout.get(name)
        if value is None and name in _OPTIONAL_TENSORS:
            continue
        if not isinstance(value, torch.Tensor) or value.dim() != len(spec):
            found = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            return f"{name!r} is not a [{', '.join(spec)}] tensor ({found})"
        for letter, size in zip(spec, value.shape, strict=True):
            if dims.setdefault(letter, size) != size:
                return (
                    f"{name!r} has shape {list(value.shape)}, which disagrees with the others "
                    f"({letter}={dims[letter]}; cut short?)"
                )
        problem = _dtype_problem(name, value)
        if problem is not None:
            return problem
    return _value_problem(rollout, dims, state)


def _dtype_problem(name: str, value: torch.Tensor) -> str | None:
    if name in _BOOL_FIELDS and value.dtype != torch.bool:
        return f"{name!r} is {value.dtype}, not bool"
    if name in _INT_FIELDS and (value.is_floating_point() or value.dtype == torch.bool):
        return f"{name!r} is {value.dtype}, not an integer tensor"
    if name not in (*_BOOL_FIELDS, *_INT_FIELDS) and not value.is_floating_point():
        return f"{name!r} is {value.dtype}, not a floating-point tensor"
    return None


def _value_problem(
    rollout: dict[str, Any], dims: dict[str, int], state: Mapping[str, Any]
) -> str | None:
    """Finite scores, versions the policy had, texts and reward terms that fit ``[B, G]``."""
    if not torch.isfinite(rollout["rewards"]).all():
        return "'rewards' holds non-finite values"
    mask = rollout["response_mask"]
    for name in ("logprobs", *_OPTIONAL_TENSORS):
        value = rollout.get(name)
        if value is not None and name not in _BOOL_FIELDS and not torch.isfinite(value[mask]).all():
            return f"{name!r} holds non-finite values on response tokens"
    version = rollout["policy_version"]
    trained = state.get("policy_version")
    if not _is_int(version) or (_is_int(trained) and not 0 <= version <= trained):
        return f"'policy_version' {version!r} is not one the policy had (0..{trained})"
    versions = rollout["sample_versions"]
    if (
        _is_int(trained)
        and versions.numel()
        and not (0 <= versions.min() <= versions.max() <= trained)
    ):
        return f"'sample_versions' lie outside the versions the policy had (0..{trained})"
    b, g = dims["B"], dims["G"]
    prompts, responses = rollout["prompts"], rollout["responses"]
    if not isinstance(prompts, list) or len(prompts) not in (0, b):
        return f"'prompts' is not a list of {b} texts"
    if not isinstance(responses, list) or len(responses) not in (0, b):
        return f"'responses' is not a list of {b} lists"
    terms = rollout["reward_terms"]
    if not isinstance(terms, dict) or not all(
        isinstance(t, torch.Tensor) and tuple(t.shape) == (b, g) for t in terms.values()
    ):
        return f"'reward_terms' is not a dict of [{b}, {g}] tensors"
    stats = rollout.get("episode_stats", {})
    if not isinstance(stats, dict) or not all(
        isinstance(t, torch.Tensor) and tuple(t.shape) == (b, g) for t in stats.values()
    ):
        return f"'episode_stats' is not a dict of [{b}, {g}] tensors"
    return None


def _shape_problem(rollout: dict[str, Any], shape: RunShape) -> str | None:
    """The run's batch against the rollout's: another prompts_per_step or group_size."""
    b, g = rollout["response_ids"].shape[:2]
    per_rank = shape.prompts_per_step // shape.world_size
    if b != per_rank:
        return (
            f"sampled {b} prompt(s) per rank, {shape.source} train_type.prompts_per_step="
            f"{shape.prompts_per_step} gives {per_rank}: resume with "
            f"train_type.prompts_per_step={b * shape.world_size} (what it was sampled with)"
        )
    if g != shape.group_size:
        return (
            f"sampled {g} response(s) per prompt, {shape.source} train_type.group_size="
            f"{shape.group_size}: resume with train_type.group_size={g}"
        )
    return None
