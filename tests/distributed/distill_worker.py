"""Worker of the two-process distillation test (importable by spawned children): RL steps of a
fresh trainer on a rank's share of pinned global rollouts, one step per rollout, as the loop
takes them (``Trainer.run_step``: the step's epoch split, prepare, update; the step counted)."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from omegaconf import OmegaConf

from astrai.rollout.rollout import Rollout

if TYPE_CHECKING:
    from astrai.training.run import Run


def take_pinned_step(run: Run, rollout: Rollout) -> dict[str, float]:
    """One RL step of ``run`` on ``rollout`` instead of a sampled one: the teachers' scores,
    the targets and the update; its metrics."""
    trainer = run.trainer
    split = trainer.epoch_split(rollout)  # the update's first epoch, π_old's and the teacher's
    metrics = trainer.prepare(rollout, split)
    metrics.update(trainer.update(rollout, split))
    run.started.state.step += 1
    return metrics


def weights(run: Run) -> dict[str, dict[str, torch.Tensor] | None]:
    """The policy's full weights (gathered under FSDP) and the critic's, copied."""
    from astrai.training.parallel import full_model_state

    parts = run.parts
    policy = full_model_state(parts.policy, parts.sharded)
    critic = None if parts.critic is None else parts.critic.state_dict()
    copied = {"policy": {k: v.detach().clone() for k, v in policy.items()}}
    copied["critic"] = (
        None if critic is None else {k: v.detach().clone() for k, v in critic.items()}
    )
    return copied


def pinned_steps(rank: int, world: int, jobs: dict[str, tuple[str, list[str]]], out: str) -> None:
    """For each ``name -> (resolved config, rollout files)`` of ``jobs``: a fresh trainer's
    steps on this rank's share (its contiguous prompts) of each rollout in turn; rank 0 saves
    ``{name: {"steps": [metrics, ...], "policy", "critic"}}`` to ``out/steps.pt``."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    # a file rendezvous: no TCP port that another process on the machine could take first
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{Path(out) / 'rendezvous'}", rank=rank, world_size=world
    )
    from astrai.training.run import Run

    results = {}
    for name, (resolved, files) in jobs.items():
        run = Run(OmegaConf.create(resolved), Path(out) / name)
        steps = []
        for file in files:
            rollout: Rollout = torch.load(file, weights_only=False)
            share = rollout.num_prompts // world
            steps.append(
                take_pinned_step(run, rollout.select(slice(rank * share, (rank + 1) * share)))
            )
        results[name] = {"steps": steps, **weights(run)}
        # the DDP wrappers (and their reducer threads) go before the process group
        del run
        gc.collect()
    if rank == 0:
        torch.save(results, Path(out) / "steps.pt")
    torch.distributed.barrier()  # every rank done before any tears down
    torch.distributed.destroy_process_group()
