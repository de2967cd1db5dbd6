"""The files of one checkpoint and the save that writes them.

A save gathers what the ranks hold (``gather_checkpoint_state``: collectives, every rank), then
rank 0 turns it and the trained objects into one writer per file (``checkpoint_writers``, in
the order ``io.write_checkpoint`` writes them, ``trainer_state.json`` last). A save at once
(``save_training_checkpoint``) runs them now; a background save (``training.background_save``)
runs the same writers, over a host snapshot, on a thread of its own. Either way the ranks agree
on a failure of rank 0's write (``agree_on_failure``), so none waits forever.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from astrai.checkpoints import io
from astrai.checkpoints.layout import (
    CHECKPOINTS_DIR,
    EXTRA_FILES_KEY,
    IN_FLIGHT_FILE,
    IN_FLIGHT_KEY,
    MODEL_CONFIG_FILE,
    OPTIMIZER_FILE,
    RUN_CONFIG_FILE,
    SCHEDULER_FILE,
    TOKENIZER_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    step_dir_name,
)
from astrai.checkpoints.reissue import REISSUE_FILE, REISSUE_KEY
from astrai.distributed import all_reduce_max, gather_objects
from astrai.files import FileWriter
from astrai.models.tokenizer import Tokenizer
from astrai.training.checkpointing import CheckpointedObjects, run_fingerprint
from astrai.training.parallel import full_optimizer_state
from astrai.training.sampling.in_flight import batch_record, reissued, sampled_batches
from astrai.training.setup import capture_rng_state
from astrai.training.state import TrainState

FORMAT_VERSION = 2  # 2: trainer_state.json lists the algorithm's files (``EXTRA_FILES_KEY``)


@dataclass(frozen=True)
class GatheredState:
    """What the ranks contribute to a checkpoint (``gather_checkpoint_state``, collectives that
    every rank joins): each rank's random streams and in-flight rollouts, and the policy's and
    its optimizer's full state (on rank 0 only, unless sharded)."""

    rng_per_rank: list[Any]
    in_flight_per_rank: list[Any]
    policy_state: dict[str, Any]
    optimizer_state: Any


def gather_checkpoint_state(parts: CheckpointedObjects, state: TrainState) -> GatheredState:
    """Called on every rank at a save: the collectives of a checkpoint, before any file."""
    rng_per_rank = gather_objects(capture_rng_state(state.generators))
    # each rank's rollouts for the next steps, sampled and not yet trained (as many on every
    # rank: the ranks agree whether to gather)
    batches = sampled_batches(state.in_flight)
    in_flight_per_rank = (
        gather_objects([batch_record(batch) for batch in batches]) if batches else []
    )
    policy_state: dict[str, Any] = {}
    optimizer_state: Any = None
    # collectives under FSDP, so every rank joins; replicas: only the writer needs them
    if parts.sharded or parts.dist.is_main:
        policy_state = parts.weights.policy_state(parts.policy, parts.sharded)
        optimizer_state = full_optimizer_state(parts.policy, parts.optimizer, parts.sharded)
    return GatheredState(rng_per_rank, in_flight_per_rank, policy_state, optimizer_state)


def checkpoint_path(parts: CheckpointedObjects, step: int) -> Path:
    """Where step ``step``'s checkpoint goes: ``<run dir>/checkpoints/step_<step>``."""
    return parts.run_dir / CHECKPOINTS_DIR / step_dir_name(step)


def save_training_checkpoint(parts: CheckpointedObjects, state: TrainState) -> Path:
    """Write ``<run dir>/checkpoints/step_<state.step>/`` atomically; return its path.

    Called on every rank: each rank's RNG streams are gathered, rank 0 alone writes, and all
    ranks wait until the checkpoint is complete.
    """
    gathered = gather_checkpoint_state(parts, state)
    path = checkpoint_path(parts, state.step)
    failure: BaseException | None = None
    if parts.dist.is_main:
        try:
            root = prepare_checkpoints_root(parts)
            io.write_checkpoint(root, state.step, checkpoint_writers(parts, state, gathered))
        except Exception as err:  # tell the other ranks before raising, so none waits forever
            failure = err
    agree_on_failure(failure, path)
    return path


def agree_on_failure(failure: BaseException | None, path: Path) -> None:
    """Every rank: raise if rank 0's write of ``path`` failed (``failure`` there), so no rank
    goes on to a collective that another one never joins."""
    if all_reduce_max(1.0 if failure is not None else 0.0) > 0:
        if failure is not None:
            raise failure
        raise CheckpointError(f"rank 0 failed to write {path}")


def prepare_checkpoints_root(parts: CheckpointedObjects) -> Path:
    """Rank 0: ``<run dir>/checkpoints/``, made, with the frozen reference written (once per
    run, the first save's)."""
    root = parts.run_dir / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    parts.weights.write_reference(parts.reference, root)
    return root


def _as_is(value: Any) -> Any:
    return value


def checkpoint_writers(
    parts: CheckpointedObjects,
    state: TrainState,
    gathered: GatheredState,
    copy: Callable[[Any], Any] = _as_is,
) -> dict[str, FileWriter]:
    """File name -> writer of a step's checkpoint, ``trainer_state.json`` last. Every value a
    writer writes is read now and passed through ``copy``: ``checkpoints.snapshot.host_snapshot``
    for a background write (the writers then hold no live object but the frozen tokenizer),
    as is for a write made at once."""
    record = copy(_trainer_record(parts, state, gathered.rng_per_rank))
    writers: dict[str, FileWriter] = {
        **parts.weights.writers(parts.policy, parts.reference, copy(gathered.policy_state)),
        MODEL_CONFIG_FILE: _json_writer(dataclasses.asdict(parts.policy.config)),
        TOKENIZER_FILE: lambda p: _save_tokenizer(parts.tokenizer, p),
        OPTIMIZER_FILE: _torch_writer(copy(gathered.optimizer_state)),
        SCHEDULER_FILE: _torch_writer(copy(parts.scheduler.state_dict())),
        RUN_CONFIG_FILE: _text_writer(OmegaConf.to_yaml(parts.cfg, resolve=True)),
    }
    for name, stateful in parts.extra.items():
        writers[name] = _torch_writer(copy(stateful.state_dict()))
    if sampled_batches(state.in_flight):
        writers[IN_FLIGHT_FILE] = _torch_writer(copy({"per_rank": gathered.in_flight_per_rank}))
    if reissued(state.in_flight):
        writers[REISSUE_FILE] = _torch_writer(copy({"steps": _reissue_records(state)}))
    # trainer_state.json last: a reader that sees it knows every other file was written
    writers[TRAINER_STATE_FILE] = _json_writer(record)
    return writers


def _trainer_record(
    parts: CheckpointedObjects, state: TrainState, rng_per_rank: list[Any]
) -> dict[str, Any]:
    """``trainer_state.json``'s content."""
    fingerprint = run_fingerprint(parts)
    record = {
        "format_version": FORMAT_VERSION,
        "train_type": parts.strategy_name,
        "step": state.step,
        "total_steps": int(parts.cfg.trainer.total_steps),
        "schedule_steps": state.schedule_steps,
        "fingerprint": fingerprint,
        # the train prompt stream is indexed by (seed, step): the step is the data position
        "data_position": state.step,
        "samples_seen": state.step * parts.samples_per_step,
        "policy_version": state.policy_version,
        "initial_metrics": state.initial_metrics,
        "eval_pending": state.eval_pending,
        "world_size": len(rng_per_rank),
        "parallel": fingerprint["parallel"],
        "rng": rng_per_rank[0],
        "rng_per_rank": rng_per_rank,
        EXTRA_FILES_KEY: [*parts.weights.files, *parts.extra],
    }
    batches, jobs = sampled_batches(state.in_flight), reissued(state.in_flight)
    if batches:
        record[IN_FLIGHT_KEY] = len(batches)
        record[EXTRA_FILES_KEY].append(IN_FLIGHT_FILE)
    if jobs:
        record[REISSUE_KEY] = [{"step": job.step, "policy_version": job.version} for job in jobs]
        record[EXTRA_FILES_KEY].append(REISSUE_FILE)
    record.update(parts.weights.record())
    return record


def _torch_writer(payload: Any) -> FileWriter:
    return lambda path: io.save_torch(payload, path)


def _json_writer(payload: Any) -> FileWriter:
    return lambda path: io.save_json(payload, path)


def _text_writer(text: str) -> FileWriter:
    def write(path: Path) -> None:
        path.write_text(text)

    return write


def _save_tokenizer(tokenizer: Tokenizer, path: Path) -> None:
    written = tokenizer.save(path.parent)
    if written.name != path.name:
        written.rename(path)


def _reissue_records(state: TrainState) -> list[dict[str, Any]]:
    return [
        {"step": job.step, "policy_version": job.version, "weights": job.weights}
        for job in reissued(state.in_flight)
    ]
