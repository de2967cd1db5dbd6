"""Save a trainer's full state as one checkpoint and restore it exactly.

What a checkpoint holds is listed in ``astrai.checkpoints.layout``; this module maps a
``Trainer``'s attributes onto those files. The frozen reference (the initial policy) is written
once per run as ``checkpoints/reference.safetensors`` and read back on resume, so the KL anchor
is the same before and after a restart.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from astrai.checkpoints import io
from astrai.checkpoints.completeness import (
    CheckpointStatus,
    check_state,
    checkpoint_problems,
    latest_complete,
    scan_checkpoints,
    short_problems,
)
from astrai.checkpoints.identity import (
    check_checkpoint_identity,
    model_fingerprint,
    saved_fingerprint,
)
from astrai.checkpoints.layout import (
    CHECKPOINTS_DIR,
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
    CheckpointError,
    CheckpointInfo,
    list_checkpoints,
    missing_files,
    step_dir_name,
)
from astrai.distributed import all_reduce_max, gather_objects
from astrai.files import FileWriter, write_file_atomic
from astrai.metrics.writers import METRICS_FILE, MetricsFileError, read_metrics_for_resume
from astrai.models.weights import stored_names
from astrai.paths import missing_reason
from astrai.training.parallel import (
    full_model_state,
    full_optimizer_state,
    load_model_state,
    load_optimizer_state,
)
from astrai.training.setup import capture_rng_state, restore_rng_state

if TYPE_CHECKING:
    from astrai.training.trainer import Trainer

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def resolve_resume(resume: str | None, run_dir: Path, train_type: str) -> Path | None:
    """``ckpt.resume`` -> the checkpoint directory to restore, or None to start fresh.

    ``auto`` picks the latest *complete* checkpoint of ``run_dir`` (``completeness``, the check
    list, prune and retention use), warning in one line about each newer incomplete one it
    skips; None if the run dir holds no ``step_<N>`` at all. A path must be a complete
    checkpoint directory. ``None`` never resumes — and refuses a run dir that already holds
    checkpoints, whose retention would otherwise prune the new run's checkpoints in favour of
    the old run's higher steps. The chosen checkpoint must hold every file ``train_type`` needs;
    the error names the missing ones.
    """
    if resume is None:
        existing = list_checkpoints(run_dir / CHECKPOINTS_DIR)
        if existing:
            raise CheckpointError(
                f"ckpt.resume=null but {run_dir} already holds checkpoints (latest "
                f"{existing[-1].path.name}); resume with ckpt.resume=auto or use a new "
                f"hydra.run.dir"
            )
        return None
    if resume == "auto":
        path = _latest_complete(run_dir / CHECKPOINTS_DIR)
        if path is None:
            return None
    else:
        path = Path(resume).expanduser()
        if not path.is_dir():
            # a path that is there (a file) is no directory; one that is not says why
            why = "" if path.exists() else f" ({path} {missing_reason(path)})"
            raise CheckpointError(f"ckpt.resume: no checkpoint directory at {path}{why}")
    check_metrics_for_resume(run_dir)
    missing = missing_files(path, train_type)
    if missing:
        recorded = CheckpointInfo(0, path).train_type()
        written_by = (
            f" (written by train_type={recorded})" if recorded not in (None, train_type) else ""
        )
        raise CheckpointError(
            f"{path}: incomplete checkpoint for {train_type}: missing {', '.join(missing)}"
            f"{written_by}"
        )
    problems = checkpoint_problems(path)
    if len(problems) == 1 and str(path) in problems[0]:
        raise CheckpointError(problems[0])  # already one line naming the file: verify's line
    if problems:
        raise CheckpointError(f"{path}: incomplete checkpoint: {short_problems(problems, path)}")
    return path


def _latest_complete(root: Path) -> Path | None:
    """``ckpt.resume=auto``'s choice: the latest complete checkpoint under ``root``; None when
    there is no ``step_<N>`` at all. Only incomplete ones is a ``CheckpointError``: starting
    fresh beside them would let retention delete the new run's checkpoints for their steps."""
    statuses = scan_checkpoints(root)
    chosen = latest_complete(statuses)
    if chosen is None:
        if statuses:
            raise CheckpointError(
                f"ckpt.resume=auto: no complete checkpoint in {root}: {_describe(statuses)} "
                f"(repair or remove them, or use a new hydra.run.dir)"
            )
        return None
    skipped = [status for status in statuses if status.info.step > chosen.step]
    if skipped:
        log.warning(
            "ckpt.resume=auto: skipped newer incomplete checkpoint(s) %s; resuming from %s",
            _describe(skipped),
            chosen.path.name,
        )
    return chosen.path


def _describe(statuses: list[CheckpointStatus]) -> str:
    return ", ".join(f"{s.info.path.name} ({s.describe()})" for s in statuses)


def check_metrics_for_resume(run_dir: Path) -> None:
    """The run dir's ``metrics.jsonl`` is one a resume can truncate at its step: a malformed
    row is a one-line ``CheckpointError`` before anything is written."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return
    try:
        read_metrics_for_resume(path)
    except MetricsFileError as err:
        raise CheckpointError(str(err)) from err
    except OSError as err:
        raise CheckpointError(f"{path}: unreadable ({err.strerror or err})") from err


def run_fingerprint(trainer: Trainer) -> dict[str, Any]:
    """What must not change across a resume (``astrai.checkpoints.identity``): saved with
    every checkpoint and compared on resume."""
    return {
        "train_type": trainer.strategy.name,
        "model": model_fingerprint(dataclasses.asdict(trainer.policy.config)),
        "task": OmegaConf.to_container(trainer.cfg.task, resolve=True),
        "seed": int(trainer.cfg.seed),
        "world_size": trainer.dist.world_size,
        "parallel": "fsdp" if trainer.sharded else "ddp",
        # the sampling stream lives on the device: a CUDA generator's state means nothing to a
        # CPU one, and another device's arithmetic would not repeat the run anyway
        "device": trainer.device.type,
    }


def save_training_checkpoint(trainer: Trainer) -> Path:
    """Write ``<run dir>/checkpoints/step_<trainer.step>/`` atomically; return its path.

    Called on every rank: each rank's RNG streams are gathered, rank 0 alone writes, and all
    ranks wait until the checkpoint is complete.
    """
    rng_per_rank = gather_objects(capture_rng_state(trainer.generators()))
    policy_state: dict[str, Any] = {}
    optimizer_state: Any = None
    # collectives under FSDP, so every rank joins; replicas: only the writer needs them
    if trainer.sharded or trainer.dist.is_main:
        policy_state = full_model_state(trainer.policy, trainer.sharded)
        optimizer_state = full_optimizer_state(trainer.policy, trainer.optimizer, trainer.sharded)
    root = trainer.run_dir / CHECKPOINTS_DIR
    path = root / step_dir_name(trainer.step)
    failure: BaseException | None = None
    if trainer.dist.is_main:
        # tied parameters once, named as the (unsharded) reference names them
        kept = set(stored_names(trainer.reference))
        policy_state = {k: v for k, v in policy_state.items() if k in kept}
        try:
            _write(trainer, root, rng_per_rank, policy_state, optimizer_state)
        except Exception as err:  # tell the other ranks before raising, so none waits forever
            failure = err
    if all_reduce_max(1.0 if failure is not None else 0.0) > 0:
        if failure is not None:
            raise failure
        raise CheckpointError(f"rank 0 failed to write {path}")
    return path


def _write(
    trainer: Trainer,
    root: Path,
    rng_per_rank: list[Any],
    policy_state: dict[str, Any],
    optimizer_state: Any,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    reference = root / REFERENCE_FILE
    if not reference.is_file():
        write_file_atomic(reference, lambda p: io.save_module(trainer.reference, p))
    fingerprint = run_fingerprint(trainer)
    state = {
        "format_version": FORMAT_VERSION,
        "train_type": trainer.strategy.name,
        "step": trainer.step,
        "total_steps": int(trainer.cfg.trainer.total_steps),
        "fingerprint": fingerprint,
        # the train prompt stream is indexed by (seed, step): the step is the data position
        "data_position": trainer.step,
        "samples_seen": trainer.step
        * trainer.strategy.prompts_per_step
        * trainer.strategy.group_size,
        "policy_version": trainer.policy_version,
        "initial_metrics": trainer.initial_metrics,
        "eval_pending": trainer.eval_pending,
        "world_size": len(rng_per_rank),
        "parallel": fingerprint["parallel"],
        "rng": rng_per_rank[0],
        "rng_per_rank": rng_per_rank,
    }
    writers: dict[str, FileWriter] = {
        MODEL_FILE: lambda p: io.save_tensors(policy_state, p),
        MODEL_CONFIG_FILE: lambda p: io.save_json(dataclasses.asdict(trainer.policy.config), p),
        TOKENIZER_FILE: lambda p: _save_tokenizer(trainer, p),
        OPTIMIZER_FILE: lambda p: io.save_torch(optimizer_state, p),
        SCHEDULER_FILE: lambda p: io.save_torch(trainer.scheduler.state_dict(), p),
        RUN_CONFIG_FILE: lambda p: _save_run_config(trainer, p),
    }
    if trainer.critic is not None and trainer.critic_optimizer is not None:
        critic, critic_optimizer = trainer.critic, trainer.critic_optimizer
        writers[VALUE_MODEL_FILE] = lambda p: io.save_torch(critic.state_dict(), p)
        writers[VALUE_OPTIMIZER_FILE] = lambda p: io.save_torch(critic_optimizer.state_dict(), p)
    # trainer_state.json last: a reader that sees it knows every other file was written
    writers[TRAINER_STATE_FILE] = lambda p: io.save_json(state, p)
    return io.write_checkpoint(root, trainer.step, writers)


def _save_run_config(trainer: Trainer, path: Path) -> None:
    path.write_text(OmegaConf.to_yaml(trainer.cfg, resolve=True))


def _save_tokenizer(trainer: Trainer, path: Path) -> None:
    written = trainer.tokenizer.save(path.parent)
    if written.name != path.name:
        written.rename(path)


def restore_training_checkpoint(trainer: Trainer, path: Path) -> dict[str, Any]:
    """Load every piece of trainer state from ``path``; return the parsed trainer state."""
    state = io.load_json(path / TRAINER_STATE_FILE)
    # before anything is loaded: a checkpoint of another setup (or world size) fails in one line
    warning = check_checkpoint_identity(
        path,
        state,
        int(trainer.cfg.trainer.total_steps),
        run_fingerprint(trainer),
        trainer.cfg.ckpt.get("allow_changes") or (),
    )
    if warning is not None:
        log.warning("%s", warning)
    check_state(state, path / TRAINER_STATE_FILE)
    reference = path.parent / REFERENCE_FILE
    io.load_module(trainer.reference, reference)
    if trainer.sharded:
        tensors = io.load_tensors(path / MODEL_FILE)
        io.check_names(tensors, trainer.reference, path / MODEL_FILE)
        load_model_state(trainer.policy, tensors, sharded=True)
        optimizer_state = io.load_torch(path / OPTIMIZER_FILE)
        load_optimizer_state(trainer.policy, trainer.optimizer, optimizer_state, sharded=True)
    else:
        io.load_module(trainer.policy, path / MODEL_FILE)
        io.load_state_dict_into(trainer.optimizer, path / OPTIMIZER_FILE)
    io.load_state_dict_into(trainer.scheduler, path / SCHEDULER_FILE)
    if trainer.critic is not None and trainer.critic_optimizer is not None:
        io.load_state_dict_into(trainer.critic, path / VALUE_MODEL_FILE)
        io.load_state_dict_into(trainer.critic_optimizer, path / VALUE_OPTIMIZER_FILE)
    _restore_rng(trainer, state, path)
    trainer.step = state["step"]
    trainer.policy_version = state["policy_version"]
    trainer.initial_metrics = dict(state["initial_metrics"])
    trainer.eval_pending = state.get("eval_pending", False)  # absent before it was saved
    return state


def _restore_rng(trainer: Trainer, state: dict[str, Any], path: Path) -> None:
    """This rank's random streams from ``state``, except those a deliberate change leaves
    freshly seeded (a rank the checkpoint lacks; the sampling stream on another device type)."""
    per_rank = state.get("rng_per_rank")
    rank = trainer.dist.rank
    # a rank the checkpoint lacks (ckpt.allow_changes=[world_size]) keeps its freshly seeded
    # streams: rank 0's would make it sample the same responses
    if isinstance(per_rank, list) and rank >= len(per_rank):
        per_rank = None
        log.warning("rank %d: no RNG state in %s; its streams start fresh", rank, path.name)
    generators = trainer.generators()
    saved_device = saved_fingerprint(state)[0].get("device", trainer.device.type)
    if saved_device != trainer.device.type:  # allowed (ckpt.allow_changes=[device])
        del generators["sample"]  # on the device; it keeps its freshly seeded stream
        log.warning(
            "%s was written on %s, this run is on %s: the sampling stream starts fresh from "
            "the seed (the resume is not exact)",
            path.name,
            saved_device,
            trainer.device.type,
        )
    try:
        if per_rank is not None or "rng_per_rank" not in state:
            rng = per_rank[rank] if per_rank is not None else state["rng"]
            restore_rng_state(rng, generators)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path / TRAINER_STATE_FILE}: bad RNG state ({err})") from err
