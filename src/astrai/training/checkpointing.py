"""Save a run's full state as one checkpoint and restore it exactly.

What a checkpoint holds is listed in ``astrai.checkpoints.layout``; this module maps a run's
``TrainState`` and the objects it trains (``CheckpointParts``) onto those files, and a restore
returns the ``TrainState`` it read. The frozen reference (the initial policy) is written
once per run as ``checkpoints/reference.safetensors`` and read back on resume, so the KL anchor
is the same before and after a restart.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from astrai.checkpoints import io
from astrai.checkpoints.completeness import (
    check_state,
)
from astrai.checkpoints.identity import (
    check_checkpoint_identity,
    model_fingerprint,
    saved_fingerprint,
)
from astrai.checkpoints.layout import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_FILES,
    ADAPTER_MODEL_FILE,
    ADAPTERS_KEY,
    CHECKPOINTS_DIR,
    EXTRA_FILES_KEY,
    IN_FLIGHT_FILE,
    IN_FLIGHT_KEY,
    MODEL_CONFIG_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    REFERENCE_FILE,
    RUN_CONFIG_FILE,
    SCHEDULER_FILE,
    TOKENIZER_FILE,
    TRAINER_STATE_FILE,
    VALUE_MODEL_FILE,
    VALUE_OPTIMIZER_FILE,
    VALUE_SCHEDULER_FILE,
    CheckpointError,
    recorded_extra_files,
    step_dir_name,
)
from astrai.checkpoints.reissue import REISSUE_FILE, REISSUE_KEY, check_reissue_file
from astrai.distributed import DistContext, all_reduce_max, gather_objects
from astrai.files import FileWriter, write_file_atomic
from astrai.models.llama import LlamaForCausalLM
from astrai.models.lora import (
    adapter_config,
    adapter_module_names,
    adapter_state_dict,
    read_adapter_weights,
    write_adapter_config,
    write_adapter_weights,
)
from astrai.models.tokenizer import Tokenizer
from astrai.models.weights import stored_names
from astrai.training.in_flight import batch_record, load_in_flight, run_shape
from astrai.training.overlap import Reissue, Settled
from astrai.training.parallel import (
    full_model_state,
    full_optimizer_state,
    load_model_state,
    load_optimizer_state,
)
from astrai.training.setup import capture_rng_state, restore_rng_state
from astrai.training.state import TrainState

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: trainer_state.json lists the algorithm's files (``EXTRA_FILES_KEY``)


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class CheckpointParts:
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
    # a LoRA run (``model.lora``): {"lora": its settings, "base": {"path", "sha256"}}; None for
    # full fine-tuning. Its checkpoints hold the adapters (PEFT's format), not model.safetensors
    adapters: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        unsaved = set(self.checkpoint_files) - set(self.extra)
        if unsaved:  # a strategy's file the trainer holds no object for: a bug, said early
            raise ValueError(f"no object to save as {', '.join(sorted(unsaved))}")


def critic_parts(
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


def run_fingerprint(parts: CheckpointParts) -> dict[str, Any]:
    """What must not change across a resume (``astrai.checkpoints.identity``): saved with
    every checkpoint and compared on resume. A LoRA run adds ``adapters``: its settings and
    the base model's SHA-256 (another base is refused; its path may change)."""
    fingerprint = _setup_fingerprint(parts)
    if parts.adapters is not None:
        fingerprint["adapters"] = {
            "lora": parts.adapters["lora"],
            "base_sha256": parts.adapters["base"]["sha256"],
        }
    return fingerprint


def _setup_fingerprint(parts: CheckpointParts) -> dict[str, Any]:
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
    return dataclasses.replace(
        state, generators=generators, in_flight=settled.batches, reissue=settled.reissue
    )


def save_training_checkpoint(parts: CheckpointParts, state: TrainState) -> Path:
    """Write ``<run dir>/checkpoints/step_<state.step>/`` atomically; return its path.

    Called on every rank: each rank's RNG streams are gathered, rank 0 alone writes, and all
    ranks wait until the checkpoint is complete.
    """
    rng_per_rank = gather_objects(capture_rng_state(state.generators))
    # each rank's rollouts for the next steps, sampled and not yet trained (as many on every
    # rank: the ranks agree whether to gather)
    in_flight_per_rank = (
        gather_objects([batch_record(batch) for batch in state.in_flight])
        if state.in_flight
        else []
    )
    policy_state: dict[str, Any] = {}
    optimizer_state: Any = None
    # collectives under FSDP, so every rank joins; replicas: only the writer needs them
    if parts.sharded or parts.dist.is_main:
        policy_state = _policy_state(parts)
        optimizer_state = full_optimizer_state(parts.policy, parts.optimizer, parts.sharded)
    root = parts.run_dir / CHECKPOINTS_DIR
    path = root / step_dir_name(state.step)
    failure: BaseException | None = None
    if parts.dist.is_main:
        if parts.adapters is None:
            # tied parameters once, named as the (unsharded) reference names them
            kept = set(stored_names(parts.reference))
            policy_state = {k: v for k, v in policy_state.items() if k in kept}
        try:
            _write(
                parts, state, root, rng_per_rank, policy_state, optimizer_state, in_flight_per_rank
            )
        except Exception as err:  # tell the other ranks before raising, so none waits forever
            failure = err
    if all_reduce_max(1.0 if failure is not None else 0.0) > 0:
        if failure is not None:
            raise failure
        raise CheckpointError(f"rank 0 failed to write {path}")
    return path


def _policy_state(parts: CheckpointParts) -> dict[str, Any]:
    """The policy's saved tensors: all of them, or a LoRA run's adapters under PEFT's names
    (``adapter_state_dict``'s). Sharded: a collective every rank joins; rank 0 gets them."""
    if parts.adapters is None:
        return full_model_state(parts.policy, parts.sharded)
    if not parts.sharded:
        return {k: v.detach().cpu() for k, v in adapter_state_dict(parts.policy).items()}
    names = adapter_module_names(parts.policy)
    full = full_model_state(parts.policy, sharded=True)
    return {peft: full[own] for peft, own in names.items() if own in full}


def _write(
    parts: CheckpointParts,
    state: TrainState,
    root: Path,
    rng_per_rank: list[Any],
    policy_state: dict[str, Any],
    optimizer_state: Any,
    in_flight_per_rank: list[Any],
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    reference = root / REFERENCE_FILE
    if parts.adapters is None and not reference.is_file():  # LoRA: the base is the reference
        write_file_atomic(reference, lambda p: io.save_module(parts.reference, p))
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
        EXTRA_FILES_KEY: [*_adapter_files(parts), *parts.extra],
    }
    if state.in_flight:
        record[IN_FLIGHT_KEY] = len(state.in_flight)
        record[EXTRA_FILES_KEY].append(IN_FLIGHT_FILE)
    if state.reissue:
        record[REISSUE_KEY] = [
            {"step": job.step, "policy_version": job.version} for job in state.reissue
        ]
        record[EXTRA_FILES_KEY].append(REISSUE_FILE)
    writers: dict[str, FileWriter] = {
        MODEL_FILE: lambda p: io.save_tensors(policy_state, p),
        MODEL_CONFIG_FILE: lambda p: io.save_json(dataclasses.asdict(parts.policy.config), p),
        TOKENIZER_FILE: lambda p: _save_tokenizer(parts.tokenizer, p),
        OPTIMIZER_FILE: lambda p: io.save_torch(optimizer_state, p),
        SCHEDULER_FILE: lambda p: io.save_torch(parts.scheduler.state_dict(), p),
        RUN_CONFIG_FILE: lambda p: _save_run_config(parts.cfg, p),
    }
    if parts.adapters is not None:  # the adapters in PEFT's format, not the whole policy
        record[ADAPTERS_KEY] = parts.adapters
        del writers[MODEL_FILE]
        config = adapter_config(parts.policy, parts.adapters["base"]["path"])
        writers[ADAPTER_CONFIG_FILE] = lambda p: write_adapter_config(config, p)
        writers[ADAPTER_MODEL_FILE] = lambda p: write_adapter_weights(policy_state, p)
    for name, stateful in parts.extra.items():
        writers[name] = _torch_writer(stateful)
    if state.in_flight:
        writers[IN_FLIGHT_FILE] = lambda p: io.save_torch({"per_rank": in_flight_per_rank}, p)
    if state.reissue:
        writers[REISSUE_FILE] = lambda p: io.save_torch({"steps": _reissue_records(state)}, p)
    # trainer_state.json last: a reader that sees it knows every other file was written
    writers[TRAINER_STATE_FILE] = lambda p: io.save_json(record, p)
    return io.write_checkpoint(root, state.step, writers)


def _adapter_files(parts: CheckpointParts) -> tuple[str, ...]:
    return ADAPTER_FILES if parts.adapters is not None else ()


def _torch_writer(stateful: Stateful) -> FileWriter:
    return lambda path: io.save_torch(stateful.state_dict(), path)


def _save_run_config(cfg: DictConfig, path: Path) -> None:
    path.write_text(OmegaConf.to_yaml(cfg, resolve=True))


def _save_tokenizer(tokenizer: Tokenizer, path: Path) -> None:
    written = tokenizer.save(path.parent)
    if written.name != path.name:
        written.rename(path)


def read_trainer_state(path: Path) -> dict[str, Any]:
    """``path``'s parsed ``trainer_state.json``, checked (``completeness.check_state``)."""
    record = io.load_json(path / TRAINER_STATE_FILE)
    check_state(record, path / TRAINER_STATE_FILE)
    return record


def restore_training_checkpoint(
    parts: CheckpointParts, path: Path, fresh: TrainState
) -> TrainState:
    """Load every saved object of ``parts`` from ``path`` in place, ``fresh``'s random streams
    too; return the run's state at the checkpoint (``fresh``: the state a fresh start has)."""
    record = io.load_json(path / TRAINER_STATE_FILE)
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
    check_state(record, path / TRAINER_STATE_FILE)
    if parts.adapters is not None:
        _restore_adapters(parts, path)
    else:
        reference = path.parent / REFERENCE_FILE
        io.load_module(parts.reference, reference)
    if parts.sharded:
        if parts.adapters is None:
            tensors = io.load_tensors(path / MODEL_FILE)
            io.check_names(tensors, parts.reference, path / MODEL_FILE)
            load_model_state(parts.policy, tensors, sharded=True)
        optimizer_state = io.load_torch(path / OPTIMIZER_FILE)
        load_optimizer_state(parts.policy, parts.optimizer, optimizer_state, sharded=True)
    else:
        if parts.adapters is None:
            io.load_module(parts.policy, path / MODEL_FILE)
        io.load_state_dict_into(parts.optimizer, path / OPTIMIZER_FILE)
    io.load_state_dict_into(parts.scheduler, path / SCHEDULER_FILE)
    _restore_extra(parts, path, record)
    _restore_rng(parts, fresh.generators, record, path)
    # none where the checkpoint lists none; checked as verify checks them, and for this run
    in_flight = load_in_flight(
        path, record, run_shape(parts.cfg, parts.dist.world_size), parts.dist, parts.device
    )
    return dataclasses.replace(
        fresh,
        step=record["step"],
        policy_version=record["policy_version"],
        initial_metrics=dict(record["initial_metrics"]),
        eval_pending=record.get("eval_pending", False),  # absent before it was saved
        resumed_from=path,
        in_flight=in_flight,
        reissue=_load_reissue(path, record),
    )


def _reissue_records(state: TrainState) -> list[dict[str, Any]]:
    return [
        {"step": job.step, "policy_version": job.version, "weights": job.weights}
        for job in state.reissue
    ]


def _load_reissue(path: Path, record: dict[str, Any]) -> list[Reissue]:
    """The rollouts a stop abandoned (``reissue.pt``), checked as ``verify`` checks them."""
    return [
        Reissue(int(job["step"]), int(job["policy_version"]), job["weights"])
        for job in check_reissue_file(path, record)
    ]


def _restore_adapters(parts: CheckpointParts, path: Path) -> None:
    """A LoRA run's adapter weights from ``adapter_model.safetensors`` (every adapter of the
    policy, nothing else; sharded or whole)."""
    file = path / ADAPTER_MODEL_FILE
    tensors = read_adapter_weights(io.load_tensors(file))
    names = adapter_module_names(parts.policy)
    missing, unexpected = sorted(set(names) - set(tensors)), sorted(set(tensors) - set(names))
    if missing or unexpected:
        raise CheckpointError(
            f"{file}: adapters do not match this run's model.lora (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]})"
        )
    own = {names[peft]: tensor for peft, tensor in tensors.items()}
    try:
        load_model_state(parts.policy, own, sharded=parts.sharded)
    except RuntimeError as err:
        raise CheckpointError(f"{file}: adapters do not match the model ({err})") from err


def _restore_extra(parts: CheckpointParts, path: Path, record: dict[str, Any]) -> None:
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
    parts: CheckpointParts,
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
