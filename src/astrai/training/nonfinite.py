"""The last line against non-finite updates: an optimizer step whose loss or gradient norm is
not finite is skipped, a run whose steps keep being skipped stops, and a checkpoint of weights
that are not finite is refused.

Values are checked where they enter (rewards, an environment's numbers); this is for whatever
gets past them (an overflow in the model itself, a learning rate too large). Without it one NaN
made its group's mean NaN, every weight NaN at the next optimizer step and the run die a step
later ("sampling met NaN probabilities"), and a checkpoint on the way would have saved the NaN
weights.

Decisions:

- A skipped step changes no weight and no optimizer state: the gradients are cleared, and
  neither the optimizers nor the learning-rate schedules step (DeepSpeed's and Megatron-LM's
  overflow skips leave the schedule too: it follows the optimizer steps taken). It is no
  policy version either (``policy/version`` counts the policy's optimizer steps taken), so the
  policy-lag guard sees a batch as behind by the updates the policy actually made, never more.
  It is counted in ``update/nonfinite_skipped``.
- The policy and the critic skip together: ``loss/total`` holds both losses, and a step that
  moved one model and not the other would pair a critic with a policy it never saw.
- Under data parallelism every rank decides alike, without a collective of its own, so no
  rank steps while another skips: DDP all-reduces the gradients before the norm is taken and
  FSDP's norm is the global one, so every rank sees the same norms, and the norms decide. The
  loss decides too in one process only: a rank's loss is its own share, which could split the
  ranks, and a loss that is not finite on one rank makes its gradients, and so the all-reduced
  ones every rank clips, not finite as well (an overflow's derivatives overflow too); where it
  does not, the gradients are finite and so is the step.
- The count of skips in a row lives here, not in ``TrainState``: a skipped step leaves the
  weights as they were, so a checkpoint between two skips is a good one, and a run resumed from
  it that meets the same fault stops after ``trainer.max_nonfinite_updates`` more (as
  ``RewardSignalWatch``'s counts start again at a resume). Resuming stays exact: the count changes
  nothing a step computes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LRScheduler

from astrai.distributed import DistContext, all_reduce_max, as_dtensor
from astrai.training.optim import clip_gradients

log = logging.getLogger("astrai.training.trainer")  # the trainer's lines, one logger name

MaxFn = Callable[[float], float]
LOSS_METRIC = "loss/total"  # the loss that was back-propagated (every strategy emits it)
SKIPPED_METRIC = "update/nonfinite_skipped"


class NonFiniteUpdate(RuntimeError):
    """``trainer.max_nonfinite_updates`` optimizer steps in a row skipped for a non-finite loss
    or gradient norm, or a checkpoint of non-finite weights refused: the run stops (one line,
    exit 2), its last checkpoint intact."""


@dataclass(frozen=True)
class Trained:
    """One trained model with what steps it, and the metric its gradient norm is logged as."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: LRScheduler
    norm_metric: str


def all_finite(values: Sequence[Tensor]) -> bool:
    """Whether every one of ``values`` (scalars, on any devices) is finite: one read of the
    device."""
    device = values[0].device
    return bool(torch.stack([torch.isfinite(v.detach()).all().to(device) for v in values]).all())


class NonFiniteGuard:
    """Steps the trained models unless the loss or a gradient norm is not finite, and stops the
    run after ``limit`` skipped steps in a row (module docstring).

    Args:
        max_norm: ``trainer.max_grad_norm``, the clipping of every trained model.
        limit: ``trainer.max_nonfinite_updates``.
        dist: this process's place (None: one process): rank 0 logs the skips (every rank
            counts alike); with several ranks the gradient norms alone decide (module docstring).
    """

    def __init__(self, max_norm: float, limit: int, dist: DistContext | None = None) -> None:
        dist = dist or DistContext()  # None: one process
        self.max_norm = max_norm
        self.limit = int(limit)
        self.enabled = dist.is_main
        self.loss_decides = dist.world_size == 1
        self.in_a_row = 0  # skipped optimizer steps since the last one taken

    def step(self, trained: Sequence[Trained], metrics: dict[str, Tensor], where: int) -> bool:
        """Clip each model's gradients to ``max_norm`` (its norm before clipping into
        ``metrics``), then step its optimizer and schedule unless ``metrics``' loss or a norm is
        not finite; clear the gradients either way. Returns whether it stepped.

        Raises:
            NonFiniteUpdate: at the ``limit``-th skipped step in a row (``where``: the RL step).
        """
        norms = [clip_gradients(t.model, self.max_norm) for t in trained]
        metrics.update({t.norm_metric: norm for t, norm in zip(trained, norms, strict=True)})
        loss = metrics.get(LOSS_METRIC) if self.loss_decides else None
        # the norms are the same on every rank (module docstring): all ranks skip together
        ok = all_finite(norms if loss is None else [loss, *norms])
        for t in trained:
            if ok:
                t.optimizer.step()
                t.scheduler.step()
            t.optimizer.zero_grad(set_to_none=True)
        if ok:
            self.in_a_row = 0
            return True
        self.in_a_row += 1
        values = ", ".join(f"{name} {float(metrics[name]):g}" for name in _named(metrics, trained))
        if self.in_a_row >= self.limit:
            raise NonFiniteUpdate(
                f"{self.in_a_row} optimizer steps in a row had a non-finite loss or gradient "
                f"norm (step {where}; the last: {values}) and were skipped "
                f"(trainer.max_nonfinite_updates={self.limit}): they left the weights as they "
                "were, the last checkpoint is intact; look for what overflows (a reward, the "
                "learning rate, the precision)"
            )
        if self.enabled:
            log.warning(
                "step %d: skipped an optimizer step with a non-finite loss or gradient norm "
                "(%s); %d in a row of trainer.max_nonfinite_updates=%d",
                where,
                values,
                self.in_a_row,
                self.limit,
            )
        return False


def _named(metrics: dict[str, Tensor], trained: Sequence[Trained]) -> list[str]:
    """The loss's and the norms' metric names, for the messages."""
    names = [LOSS_METRIC] if LOSS_METRIC in metrics else []
    return names + [t.norm_metric for t in trained]


def first_nonfinite(named: Iterable[tuple[str, Tensor]]) -> str | None:
    """The name of the first tensor of ``named`` holding a NaN or an infinity (this rank's
    shard of a sharded one), None when all are finite: one read of the device."""
    items = list(named)
    if not items:
        return None
    device = items[0][1].device
    finite = torch.stack(
        [torch.isfinite(_local(t).detach()).all().to(device) for _, t in items]
    ).cpu()
    bad = (~finite).nonzero()
    return items[int(bad[0])][0] if len(bad) else None


def _local(tensor: Tensor) -> Tensor:
    """An FSDP parameter's local shard; any other tensor as it is."""
    dtensor = as_dtensor(tensor)
    return tensor if dtensor is None else dtensor.to_local()


def check_finite_weights(
    models: Mapping[str, nn.Module | None], checkpoint: str, max_over_ranks: MaxFn = all_reduce_max
) -> None:
    """Refuse, on every rank alike, to checkpoint weights that are not finite (``models``:
    role -> module, None = absent): ``NonFiniteUpdate`` naming the first such tensor."""
    found = None
    for role, model in models.items():
        if model is not None and found is None:
            name = first_nonfinite(model.named_parameters())
            found = None if name is None else f"{role} weight {name!r}"
    if max_over_ranks(0.0 if found is None else 1.0) == 0.0:
        return
    raise NonFiniteUpdate(
        f"refused to write checkpoint {checkpoint}: the {found or 'weights (on another rank)'} "
        "holds NaN or infinite values; the last checkpoint is intact"
    )
