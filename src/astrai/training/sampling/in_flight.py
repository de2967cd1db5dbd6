"""In-flight rollouts across a checkpoint (``train_type.max_policy_lag`` > 0).

What they are: one type, ``InFlight``, of a ``kind``: ``SampledBatch`` (sampled, waiting for
its step) or ``Reissue`` (abandoned unsampled, sampled again exactly on resume), plain records
with no thread or stream code, which the ``TrainState`` holds in one list. Each rank's
``SampledBatch``es as plain data for ``in_flight.pt`` and back, checked on the way in by the
check ``verify`` runs (``astrai.checkpoints.in_flight``), and the staleness refusal a resumed
run would otherwise meet only when it came to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from astrai.checkpoints.in_flight import RunShape, check_in_flight_object
from astrai.checkpoints.layout import IN_FLIGHT_FILE, CheckpointError
from astrai.distributed import DistContext
from astrai.rollout.rollout import Rollout
from astrai.rollout.staleness import StaleRolloutError, check_policy_lag


@dataclass
class InFlight:
    """A rollout in flight across a checkpoint (``TrainState.in_flight``), of one ``kind``:
    ``sampled`` (a ``SampledBatch``, waiting for its step: ``in_flight.pt``) or ``reissue``
    (a ``Reissue``, abandoned unsampled by a stop and sampled again on resume:
    ``reissue.pt``).

    Attributes:
        step: the step (1-based) that trains it.
    """

    kind: ClassVar[str]
    step: int


@dataclass
class SampledBatch(InFlight):
    """One step's sampled, scored rollout (not yet prepared) and how it was drawn.

    Attributes:
        rollout: the sampled rollout; ``rollout.sample_versions`` say which policy drew it.
        metrics: the sampling's own step metrics (dynamic sampling's ``rollout/*`` counts).
        sample_s: seconds the sampling took (on the sampling thread when overlapped).
    """

    kind: ClassVar[str] = "sampled"
    rollout: Rollout
    metrics: dict[str, float] = field(default_factory=dict)
    sample_s: float = 0.0


@dataclass
class Reissue(InFlight):
    """A rollout submitted and abandoned by a stop before it finished: what samples it again
    exactly (the sampling stream is rewound to before the first of them).

    Attributes:
        version: the policy version it is sampled on (stamped on its samples).
        weights: the trainable tensors of the snapshot it samples with (CPU); None for an
            engine with its own weights (vLLM), which samples the weights it then holds.
    """

    kind: ClassVar[str] = "reissue"
    version: int
    weights: dict[str, torch.Tensor] | None = None


def sampled_batches(items: list[InFlight]) -> list[SampledBatch]:
    """The ``sampled`` ones of ``items``, in order."""
    return [item for item in items if isinstance(item, SampledBatch)]


def reissued(items: list[InFlight]) -> list[Reissue]:
    """The ``reissue`` ones of ``items``, in order."""
    return [item for item in items if isinstance(item, Reissue)]


def run_shape(cfg: DictConfig, world_size: int) -> RunShape:
    """The batch this run samples per step (what a checkpoint's in-flight rollouts must be)."""
    return RunShape(
        world_size, int(cfg.train_type.prompts_per_step), int(cfg.train_type.group_size)
    )


def check_in_flight(
    batches: list[SampledBatch],
    policy_version: int,
    updates_per_step: int,
    max_policy_lag: int,
    checkpoint: Path | None,
) -> None:
    """Refuse at start, with ``CheckpointError`` naming ``checkpoint``, the in-flight rollouts
    a resumed run would refuse when it comes to them (``rollout.staleness``): the j-th
    (0-based) trains once the policy has taken j more updates."""
    for ahead, batch in enumerate(batches):
        assert batch.rollout.sample_versions is not None  # checked on load
        try:
            check_policy_lag(
                batch.rollout.sample_versions,
                policy_version + ahead * updates_per_step,
                updates_per_step,
                max_policy_lag,
                batch.step,
            )
        except StaleRolloutError as err:
            raise CheckpointError(f"{checkpoint}: an in-flight rollout: {err}") from None


def batch_record(batch: SampledBatch) -> dict[str, Any]:
    """``batch`` as plain data on the CPU (tensors, numbers, strings), for a checkpoint read
    back with ``torch.load(weights_only=True)``."""
    rollout: dict[str, Any] = {}
    for item in fields(Rollout):
        value = getattr(batch.rollout, item.name)
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
        elif isinstance(value, dict):
            value = {name: scores.detach().cpu() for name, scores in value.items()}
        rollout[item.name] = value
    return {
        "step": batch.step,
        "rollout": rollout,
        "metrics": dict(batch.metrics),
        "sample_s": batch.sample_s,
    }


def in_flight_batches(
    loaded: Any,
    checkpoint: Path,
    state: dict[str, Any],
    shape: RunShape,
    dist: DistContext,
    device: torch.device,
) -> list[SampledBatch]:
    """This rank's in-flight rollouts from ``loaded``, the ``in_flight.pt`` of ``checkpoint``
    that the resume read once (``resume.ResumePoint``: checked as ``verify`` checks them),
    checked for this run's ``shape`` (another world size, prompts_per_step or group_size:
    ``CheckpointError``); [] for none (``loaded`` None)."""
    if loaded is None:
        return []
    per_rank = check_in_flight_object(loaded, state, checkpoint / IN_FLIGHT_FILE, shape)
    return [batch_from_record(batch, device) for batch in per_rank[dist.rank]] if per_rank else []


def batch_from_record(record: dict[str, Any], device: torch.device) -> SampledBatch:
    """A ``batch_record`` (checked) back as a ``SampledBatch`` with its tensors on ``device``."""
    rollout = {}
    for name, value in record["rollout"].items():
        if isinstance(value, torch.Tensor):
            value = value.to(device)
        elif isinstance(value, dict):
            value = {term: scores.to(device) for term, scores in value.items()}
        rollout[name] = value
    return SampledBatch(
        step=int(record["step"]),
        rollout=Rollout(**rollout),
        metrics=dict(record["metrics"]),
        sample_s=float(record["sample_s"]),
    )
