"""Gradient accumulation: one minibatch's gradients from micro-batches of it.

Each micro-batch's loss is divided by the *whole* minibatch's counts (``Divisors``: its tokens
and sequences), so the micro-batches' gradients and detached metrics sum to exactly the
minibatch's own (uneven parts included, every ``loss_agg`` mode); only one micro-batch's
activations are alive at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from astrai.algorithms.aggregation import Divisors, whole_minibatch_divisors
from astrai.distributed import all_reduce_sum
from astrai.rollout.minibatch import Minibatch

# (part, divisors) -> (loss, detached metrics)
LossFn = Callable[[Minibatch, Divisors | None], tuple[Tensor, dict[str, Tensor]]]


def accumulate_gradients(
    minibatch: Minibatch,
    parts: Sequence[Tensor],
    divisors: Divisors | None,
    loss_fn: LossFn,
    replicas: Sequence[nn.Module | None] = (),
) -> dict[str, Tensor]:
    """Backward the minibatch's loss, one micro-batch per part of ``parts`` (one part: the
    whole minibatch at once, as it is); returns the summed metrics.

    Args:
        minibatch: ``M`` sequences.
        parts: row indices of each micro-batch, covering every row once
            (``models.length_parts``); each micro-batch of several is trimmed to the columns
            its rows use (``Minibatch.trimmed``).
        divisors: the whole minibatch's counts over every rank (None: its own).
        loss_fn: the strategy's loss of one part, given the divisor.
        replicas: the DDP-wrapped models: their gradient all-reduce runs once, in the last
            micro-batch's backward (``no_sync`` before it).
    """
    if len(parts) == 1:
        loss, metrics = loss_fn(minibatch, divisors)
        loss.backward()
        return metrics
    if divisors is None:  # one process: the minibatch's own counts
        divisors = whole_minibatch_divisors(minibatch.loss_mask)
    totals: dict[str, Tensor] = {}
    for i, part in enumerate(parts):
        with _sync_gradients(replicas, enabled=i == len(parts) - 1):
            loss, metrics = loss_fn(minibatch.select(part).trimmed(), divisors)
            loss.backward()
        for name, value in metrics.items():
            totals[name] = totals[name] + value if name in totals else value
    return totals


def ranks_divisors(minibatch: Minibatch, world_size: int) -> Divisors | None:
    """The divisors of the minibatch's losses over every rank (one collective); None in one
    process, where the minibatch's own counts divide."""
    if world_size == 1:
        return None
    return whole_minibatch_divisors(minibatch.loss_mask, all_reduce_sum, world_size)


@contextlib.contextmanager
def _sync_gradients(replicas: Sequence[nn.Module | None], enabled: bool) -> Iterator[None]:
    """DDP's gradient all-reduce on (the default) or off for the passes inside; a sharded or
    single-process model syncs its own way."""
    with contextlib.ExitStack() as stack:
        if not enabled:
            for model in replicas:
                if isinstance(model, DistributedDataParallel):
                    stack.enter_context(model.no_sync())
        yield
