"""Save a run's full state as one checkpoint and restore it exactly.

What a checkpoint holds is listed in ``astrai.checkpoints.layout``; this module names what a
run saves (its ``TrainState`` and the objects it trains, ``CheckpointedObjects``) and its
fingerprint, and restores them: a restore returns the ``TrainState`` it read. The files a save
writes are ``training.checkpoint_files``'s (at once, or in the background:
``training.background_save``). The frozen reference (the initial policy) is written
once per run as ``checkpoints/reference.safetensors`` and read back on resume, so the KL anchor
is the same before and after a restart.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from astrai.checkpoints import io
from astrai.checkpoints.identity import (
    check_checkpoint_identity,
    model_fingerprint,
    saved_fingerprint,
)
from astrai.checkpoints.layout import (
    OPTIMIZER_FILE,
    SCHEDULER_FILE,
    TRAINER_STATE_FILE,
    VALUE_MODEL_FILE,
    VALUE_OPTIMIZER_FILE,
    VALUE_SCHEDULER_FILE,
    CheckpointError,
    recorded_extra_files,
)
from astrai.distributed import DistContext
from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import Tokenizer
from astrai.training.parallel import (
    load_optimizer_state,
)
from astrai.training.resume import ResumePoint
from astrai.training.sampling.in_flight import InFlight, Reissue, in_flight_batches, run_shape
from astrai.training.sampling.overlap import Settled
from astrai.training.setup import restore_rng_state
from astrai.training.state import TrainState
from astrai.training.weight_format import FullWeights, WeightFormat

log = logging.getLogger(__name__)


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class CheckpointedObjects:
    """What a checkpoint saves besides the ``TrainState``, and the facts its fingerprint
    records. The objects are loaded in place on restore.

    Attributes:
        strategy: its ``name`` labels the checkpoint; its ``checkpoint_files`` must all be in
            ``extra`` (files beyond ``layout.COMMON_FILES``, each with the object it holds).
    """

    cfg: DictConfig
    run_dir: Path
    strategy_name: str
    checkpoint_files: Sequence[str]
    samples_per_step: int  # prompts_per_step × group_size
    policy: LlamaForCausalLM
    reference: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Stateful
    tokenizer: Tokenizer
    extra: dict[str, Stateful]
    dist: DistContext
    device: torch.device
    sharded: bool
    # the policy's weights as saved: full, or a LoRA run's adapters (``weight_format``)
    weights: WeightFormat = dataclasses.field(default_factory=FullWeights)
    # fingerprint keys of the run's other parts (distill=opd's ``teacher``: its weights' hash)
    identities: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        unsaved = set(self.checkpoint_files) - set(self.extra)
        if unsaved:  # a strategy's file the trainer holds no object for: a bug, said early
            raise ValueError(f"no object to save as {', '.join(sorted(unsaved))}")


def critic_objects(
    critic: Stateful | None, optimizer: Stateful | None, scheduler: Stateful | None
) -> dict[str, Stateful]:
    """A PPO critic's three checkpoint files and their objects ({} without a critic); a LoRA
    run's critic is its trainable tensors (``adapters.TrainableState``)."""
    if critic is None or optimizer is None or scheduler is None:
        return {}
    return {
        VALUE_MODEL_FILE: critic,
        VALUE_OPTIMIZER_FILE: optimizer,
        VALUE_SCHEDULER_FILE: scheduler,
    }


def run_fingerprint(parts: CheckpointedObjects) -> dict[str, Any]:
    """What must not change across a resume (``astrai.checkpoints.identity``): saved with
    every checkpoint and compared on resume. A LoRA run adds ``adapters``: its settings and
    the base model's SHA-256 (another base is refused; its path may change)."""
    return {**_setup_fingerprint(parts), **parts.weights.fingerprint(), **parts.identities}


def _setup_fingerprint(parts: CheckpointedObjects) -> dict[str, Any]:
    return {
        "train_type": parts.strategy_name,
        "model": model_fingerprint(dataclasses.asdict(parts.policy.config)),
        "task": OmegaConf.to_container(parts.cfg.task, resolve=True),
        "seed": int(parts.cfg.seed),
        "world_size": parts.dist.world_size,
        "parallel": "fsdp" if parts.sharded else "ddp",
        # the sampling stream lives on the device: a CUDA generator's state means nothing to a
        # CPU one, and another device's arithmetic would not repeat the run anyway
        "device": parts.device.type,
    }


def settled_state(
    state: TrainState, settled: Settled, stream: torch.Generator | None
) -> TrainState:
    """``state`` as a checkpoint saves it with a sampling thread: its in-flight rollouts
    (``settled.batches``), the ones a stop abandoned (``settled.reissue``) and, when it
    abandoned any, the sampling stream (``stream``, one of ``state.generators``) as it was
    before the first of them: the checkpoint counts no rollout it does not hold, and a resume
    samples the abandoned ones as the straight run did."""
    generators = state.generators
    if settled.stream_state is not None and stream is not None:
        rewound = torch.Generator(device=stream.device)
        rewound.set_state(settled.stream_state)
        generators = {name: rewound if g is stream else g for name, g in generators.items()}
    in_flight: list[InFlight] = [*settled.batches, *settled.reissue]
    return dataclasses.replace(state, generators=generators, in_flight=in_flight)


def restore_training_checkpoint(
    parts: CheckpointedObjects, resume: ResumePoint, fresh: TrainState
) -> TrainState:
    """Load every saved object of ``parts`` from the checkpoint ``resume`` read and checked,
    ``fresh``'s random streams too; return the run's state at the checkpoint (``fresh``: the
    state a fresh start has)."""
    path, record = resume.path, resume.record
    # before anything is loaded: a checkpoint of another setup (or world size) fails in one line
    warning = check_checkpoint_identity(
        path,
        record,
        int(parts.cfg.trainer.total_steps),
        run_fingerprint(parts),
        parts.cfg.ckpt.get("allow_changes") or (),
    )
    if warning is not None:
        log.warning("%s", warning)
    parts.weights.restore(parts.policy, parts.reference, path, parts.sharded)
    if parts.sharded:
        optimizer_state = io.load_torch(path / OPTIMIZER_FILE)
        load_optimizer_state(parts.policy, parts.optimizer, optimizer_state, sharded=True)
    else:
        io.load_state_dict_into(parts.optimizer, path / OPTIMIZER_FILE)
    io.load_state_dict_into(parts.scheduler, path / SCHEDULER_FILE)
    _restore_extra(parts, path, record)
    _restore_rng(parts, fresh.generators, record, path)
    # none where the checkpoint lists none; checked for this run's batch as well
    shape = run_shape(parts.cfg, parts.dist.world_size)
    in_flight = in_flight_batches(resume.in_flight, path, record, shape, parts.dist, parts.device)
    return dataclasses.replace(
        fresh,
        step=record["step"],
        policy_version=record["policy_version"],
        initial_metrics=dict(record["initial_metrics"]),
        eval_pending=record.get("eval_pending", False),  # absent before it was saved
        resumed_from=path,
        in_flight=[
            *in_flight,
            *(  # the rollouts a stop abandoned (``reissue.pt``)
                Reissue(int(job["step"]), int(job["policy_version"]), job["weights"])
                for job in resume.reissue
            ),
        ],
    )


def _restore_extra(parts: CheckpointedObjects, path: Path, record: dict[str, Any]) -> None:
    """The algorithm's objects. A format-1 PPO checkpoint has no critic schedule: the critic
    then had a constant learning rate, and its schedule starts where the policy's is."""
    saved = set(recorded_extra_files(record))
    for name, stateful in parts.extra.items():
        if name in saved or name != VALUE_SCHEDULER_FILE:
            io.load_state_dict_into(stateful, path / name)
            continue
        stateful.load_state_dict(parts.scheduler.state_dict())
        log.warning(
            "%s holds no %s (written before the critic had a schedule): the critic's "
            "schedule continues from the policy's position",
            path.name,
            VALUE_SCHEDULER_FILE,
        )


def _restore_rng(
    parts: CheckpointedObjects,
    generators: dict[str, torch.Generator],
    state: dict[str, Any],
    path: Path,
) -> None:
    """This rank's random streams from ``state``, except those a deliberate change leaves
    freshly seeded (a rank the checkpoint lacks; the sampling stream on another device type)."""
    per_rank = state.get("rng_per_rank")
    rank = parts.dist.rank
    # a rank the checkpoint lacks (ckpt.allow_changes=[world_size]) keeps its freshly seeded
    # streams: rank 0's would make it sample the same responses
    if isinstance(per_rank, list) and rank >= len(per_rank):
        per_rank = None
        log.warning("rank %d: no RNG state in %s; its streams start fresh", rank, path.name)
    generators = dict(generators)
    saved_device = saved_fingerprint(state)[0].get("device", parts.device.type)
    if saved_device != parts.device.type:  # allowed (ckpt.allow_changes=[device])
        del generators["sample"]  # on the device; it keeps its freshly seeded stream
        log.warning(
            "%s was written on %s, this run is on %s: the sampling stream starts fresh from "
            "the seed (the resume is not exact)",
            path.name,
            saved_device,
            parts.device.type,
        )
    try:
        if per_rank is not None or "rng_per_rank" not in state:
            rng = per_rank[rank] if per_rank is not None else state["rng"]
            restore_rng_state(rng, generators)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path / TRAINER_STATE_FILE}: bad RNG state ({err})") from err
