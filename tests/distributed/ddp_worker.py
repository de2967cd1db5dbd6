"""Worker of the two-process tests (importable by spawned children): one RL update on a rank's
share of a fixed global rollout."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import torch
from omegaconf import OmegaConf


def one_update(rank: int, world: int, resolved: str, rollout_file: str, out: str) -> None:
    _join(rank, world, out)
    result = _update(rank, world, resolved, rollout_file, Path(out) / "run")
    if rank == 0:
        torch.save(result, Path(out) / f"rank{rank}.pt")
    _leave()


def many_updates(rank: int, world: int, jobs: dict[str, str], rollout_file: str, out: str) -> None:
    """``one_update`` for each ``name -> resolved config`` of ``jobs`` in turn, every one from
    fresh weights on the same rollout, under one process group (one launch for them all); rank
    0 saves ``{name: result}`` to ``out/updates.pt``."""
    _join(rank, world, out)
    results = {
        name: _update(rank, world, resolved, rollout_file, Path(out) / name)
        for name, resolved in jobs.items()
    }
    if rank == 0:
        torch.save(results, Path(out) / "updates.pt")
    _leave()


def _join(rank: int, world: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    # a file rendezvous: no TCP port that another process on the machine could take first
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{Path(out) / 'rendezvous'}", rank=rank, world_size=world
    )


def _update(rank: int, world: int, resolved: str, rollout_file: str, run_dir: Path) -> dict:
    """One update of a fresh trainer on this rank's share of the rollout: the full weights
    (gathered under FSDP), the critic's, the metrics."""
    from astrai.training.parallel import full_model_state
    from astrai.training.rollout_stats import rollout_metrics
    from astrai.training.run import Run

    cfg = OmegaConf.create(resolved)
    trainer = Run(cfg, run_dir)
    rollout = torch.load(rollout_file, weights_only=False)
    share = rollout.num_prompts // world
    mine = rollout.select(slice(rank * share, (rank + 1) * share))
    metrics = trainer.trainer.prepare(mine)
    metrics.update(trainer.trainer.update(mine))
    metrics.update(
        rollout_metrics(
            mine, trainer.parts.tokenizer.eos_id, trainer.parts.reward.accuracy_threshold
        )
    )
    critic = trainer.parts.critic.state_dict() if trainer.parts.critic is not None else None
    policy = full_model_state(trainer.parts.policy, trainer.parts.sharded)  # collective under FSDP
    result = {
        "policy": policy,
        "critic": critic,
        "metrics": metrics,
        "sharded": trainer.parts.sharded,
    }
    # the DDP wrappers (and their reducer threads) go before the process group, or
    # interpreter shutdown can abort the process
    del trainer
    gc.collect()
    return result


def _leave() -> None:
    torch.distributed.barrier()  # every rank done before any tears down
    torch.distributed.destroy_process_group()


def collectives_under(rank: int, world: int, backend: str, resolved: str, out: str) -> None:
    """One RL step, the stop vote and a checkpoint on CPU under a process group with the given
    ``backend`` spec: every collective the trainer makes must find a backend for its tensors."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        backend, init_method=f"file://{Path(out) / 'rendezvous'}", rank=rank, world_size=world
    )
    from astrai.training.run import Run
    from astrai.training.stop_agreement import agreed_stop_reason

    trainer = Run(OmegaConf.create(resolved), Path(out) / "run")
    metrics = trainer.train_step()  # rollout, prepare, update, rollout metrics and accuracy
    stopped = agreed_stop_reason("SIGTERM" if rank == 1 else None)
    checkpoint = trainer.save_checkpoint()  # gathers every rank's random state
    if rank == 0:
        torch.save({"metrics": metrics, "stopped": stopped, "checkpoint": str(checkpoint)},
                   Path(out) / "result.pt")  # fmt: skip
    torch.distributed.barrier()
    del trainer
    gc.collect()
    torch.distributed.destroy_process_group()


def reduce_a_cpu_tensor(rank: int, world: int, backend: str, out: str) -> None:
    """``all_reduce_max`` (the stop vote, a CPU tensor) under ``backend``; raises if no backend
    serves CPU tensors."""
    torch.distributed.init_process_group(
        backend, init_method=f"file://{Path(out) / 'rendezvous'}", rank=rank, world_size=world
    )
    from astrai.distributed import all_reduce_max

    # every rank past its connections before any fails and leaves: a rank still connecting
    # would see "Connection closed by peer" instead of the error under test
    ready = torch.distributed.FileStore(str(Path(out) / "ready"), world)
    ready.set(f"rank{rank}", "1")
    ready.wait([f"rank{r}" for r in range(world)])
    try:
        assert all_reduce_max(float(rank)) == world - 1
    finally:
        torch.distributed.destroy_process_group()


def evaluate_then_stop(rank: int, world: int, resolved: str, out: str) -> None:
    """An evaluation with the decoding calls recorded, then a run whose rank 0 got SIGTERM
    during start-up; rank 0 saves ``{"lockstep": [...], "summaries": [...]}``."""
    import signal

    from astrai.distributed import gather_objects
    from astrai.rollout.engines import engine
    from astrai.training.run import Run
    from astrai.training.stopping import catch_stop_signals

    _join(rank, world, out)
    lockstep: list[bool] = []
    # evaluation decodes through the engine (engine=torch: rollout.engines.engine's generate)
    decode = engine.generate

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - generate's own
        lockstep.append(kwargs.get("lockstep", False))
        return decode(*args, **kwargs)

    engine.generate = recording
    trainer = Run(OmegaConf.create(resolved), Path(out) / "run")
    trainer.eval_metrics()
    catch_stop_signals()
    if rank == 0:
        os.kill(os.getpid(), signal.SIGTERM)  # rank 1 has none: only the vote tells it
    summary = trainer.fit()
    summaries = gather_objects({k: summary[k] for k in ("step", "stopped")})
    if rank == 0:
        torch.save({"lockstep": lockstep, "summaries": summaries}, Path(out) / "result.pt")
    del trainer
    gc.collect()
    _leave()


def background_write_fails(rank: int, world: int, resolved: str, out: str) -> None:
    """One step, then a background save whose write fails on rank 0 (a full disk): each rank
    writes what the wait for it raised into ``out/rank<r>.txt``, then one more collective (a
    rank left waiting would hang it)."""
    import errno

    from astrai.checkpoints import io
    from astrai.cli_errors import error_line
    from astrai.training.run import Run

    def no_space(payload: object, path: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    _join(rank, world, out)
    trainer = Run(OmegaConf.create(resolved), Path(out) / "run")
    trainer.train_step()
    if rank == 0:
        io.save_torch = no_space  # type: ignore[assignment]
    trainer.save_checkpoint(background=True)  # returns on both ranks: the write is rank 0's
    try:
        trainer.wait_for_checkpoint()
        raised = "nothing"
    except Exception as err:
        raised = f"{type(err).__name__}: {error_line(err)}"
    (Path(out) / f"rank{rank}.txt").write_text(raised)
    trainer.close()
    del trainer
    gc.collect()
    _leave()
