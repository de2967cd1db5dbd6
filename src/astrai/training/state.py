"""A run's mutable state as one record: what the loop advances, a checkpoint saves and a
restore returns (as torchtune's recipes keep theirs).

Everything else a run holds is built from its config at start: the models, optimizers and
schedules change in place and are saved beside this record (``training.checkpointing``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from astrai.training.sampling.in_flight import InFlight


@dataclass
class TrainState:
    """Where a run is.

    Attributes:
        generators: the run's dedicated random streams, ``sample`` (on the training device,
            one per rank) and ``shuffle`` (CPU); advanced in place, saved with every
            checkpoint.
        step: RL steps completed.
        policy_version: policy optimizer steps taken (the rollout's behaviour version).
        initial_metrics: the step-0 evaluation ({} until it ran).
        eval_pending: this step's evaluation was due and a stop signal abandoned it: the
            resumed run runs it first, so its row reads as the uninterrupted run's.
        schedule_steps: the optimizer steps the learning-rate schedules span (the
            ``trainer.total_steps`` they were built for; see ``ckpt.resume_schedule``).
        resumed_from: the checkpoint this process started from (None: a fresh start).
        in_flight: the rollouts a checkpoint held (``train_type.max_policy_lag`` > 0), until
            the trainer takes them over, each of its ``kind``: the ``sampled`` ones for the
            next steps, not yet trained, in step order, then those a stop abandoned unsampled
            (``reissue``, ``overlap``), submitted again on resume with the weights they had.
    """

    generators: dict[str, torch.Generator]
    schedule_steps: int
    step: int = 0
    policy_version: int = 0
    initial_metrics: dict[str, float] = field(default_factory=dict)
    eval_pending: bool = False
    resumed_from: Path | None = None
    in_flight: list[InFlight] = field(default_factory=list)
