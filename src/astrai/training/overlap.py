"""Rollouts that overlap the update (``train_type.max_policy_lag`` = L > 0).

One sampling thread beside the training thread. The schedule is fixed, so a run is a function
of its config and seed (and a resumed run repeats the straight one bit for bit): the rollout
trained at step ``s`` (1-based) is sampled on the weights the policy had after update
``max(0, s - 1 - L)``, i.e. submitted at the start of step ``s - L`` before that step's update,
and trained ``min(L, s - 1)`` updates later. At L = 1 the rollout of step t+1 is sampled while
step t's update runs, on the weights step t started from.

Admission control, not dropping: a rollout is submitted only when the bound allows it, so no
sampled batch is ever discarded for staleness. The jobs run one at a time in submission order,
so the run's sampling stream is drawn in step order, as in the synchronous loop.

Where the weights come from: an engine that samples the live policy (``engine=torch``) samples
a snapshot (a ring of L copies of the policy, each reloaded when its next job is submitted; the
copy for step ``s`` is ``s % L``, last used by step ``s - L``, already taken). An engine with
its own copy of the weights (vLLM) is its own snapshot: ``before_weight_sync`` waits for its
jobs to finish before the trainer loads the updated weights into it.

Threads: each side runs on half of ``infra.num_threads`` (at least one each; torch's intra-op
count is kept per thread once a thread has run an op, so the two are set one by one).
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from astrai.checkpoints import io
from astrai.checkpoints.completeness import CheckpointError
from astrai.distributed import DistContext
from astrai.rollout.rollout import Rollout
from astrai.rollout.staleness import StaleRolloutError, check_policy_lag


@dataclass
class SampledBatch:
    """One step's sampled, scored rollout (not yet prepared) and how it was drawn.

    Attributes:
        step: the step (1-based) that trains it.
        rollout: the sampled rollout; ``rollout.sample_versions`` say which policy drew it.
        metrics: the sampling's own step metrics (dynamic sampling's ``rollout/*`` counts).
        sample_s: seconds the sampling took (on the sampling thread when overlapped).
    """

    step: int
    rollout: Rollout
    metrics: dict[str, float] = field(default_factory=dict)
    sample_s: float = 0.0


# (the step's index: steps completed when it trains; the model to sample with; its version)
SampleFn = Callable[[int, nn.Module, int], tuple[Rollout, dict[str, float]]]


def split_threads(total: int) -> int:
    """Intra-op threads of each side (sampling, updating) when ``total`` are the job's."""
    return max(1, total // 2)


class RolloutPipeline:
    """The rollouts of the next ``lag`` steps, sampled on a background thread.

    Args:
        sample: ``sample(index, model, version)`` -> (rollout, metrics): the rollout trained at
            step ``index + 1``, sampled with ``model`` (the policy's weights at ``version``).
        policy: the live policy (what snapshots copy).
        lag: ``train_type.max_policy_lag`` (>= 1).
        total_steps: the run's last step; nothing beyond it is sampled.
        snapshots: whether the engine samples the model it is given (``engine=torch``: a
            snapshot per job) or keeps its own weights (vLLM: no copy).
    """

    def __init__(
        self,
        sample: SampleFn,
        policy: nn.Module,
        lag: int,
        total_steps: int,
        snapshots: bool = True,
    ) -> None:
        if lag < 1:
            raise ValueError("a RolloutPipeline overlaps at least one step (max_policy_lag >= 1)")
        self.sample = sample
        self.policy = policy
        self.lag = lag
        self.total_steps = total_steps
        self.copies: list[nn.Module] = []
        if snapshots:
            self.copies = [_frozen_copy(policy) for _ in range(lag)]
        self.pending: deque[tuple[int, Future[SampledBatch] | SampledBatch]] = deque()
        self.next_step = 1  # the next step whose rollout is not yet submitted
        # torch's intra-op thread count is per thread once it has run an op: each side runs
        # on half of the job's (at least one each) while the pipeline exists
        self.threads_before = torch.get_num_threads()
        threads = split_threads(self.threads_before)
        torch.set_num_threads(threads)
        device = next(policy.parameters()).device
        self.executor: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="astrai-sampler",
            initializer=_init_sampling_thread,
            initargs=(threads, device),
        )

    def restore(self, batches: list[SampledBatch], next_step: int) -> None:
        """Continue a run at ``next_step``: ``batches`` are its in-flight rollouts (a
        checkpoint's), the steps ``next_step, next_step + 1, ...``."""
        self.pending = deque((batch.step, batch) for batch in batches)
        self.next_step = next_step + len(batches)

    def take(self, step: int, version: int) -> SampledBatch:
        """The rollout of ``step`` (waiting for it), after submitting every step up to
        ``step + lag`` on the policy's current weights (``version``)."""
        if not self.pending:  # a fresh start (or a resume with none in flight): sample it now
            self._submit_up_to(step, version)
        entry_step, entry = self.pending.popleft()
        if entry_step != step:  # the schedule is the loop's; a mismatch is a bug, said early
            raise RuntimeError(f"the rollout in flight is step {entry_step}'s, not step {step}'s")
        batch = _done(entry)
        self._submit_up_to(step + self.lag, version)
        return batch

    def settle(self) -> list[SampledBatch]:
        """Wait for every submitted rollout; the in-flight batches, in step order (what a
        checkpoint saves)."""
        batches = [(step, _done(entry)) for step, entry in self.pending]
        self.pending = deque(batches)
        return [batch for _, batch in batches]

    def before_weight_sync(self) -> None:
        """An engine with its own weights (no snapshots) is loaded with the update only once
        its jobs, drawn on the weights they were submitted with, are done."""
        if not self.copies:
            self.settle()

    def close(self) -> None:
        """Finish the submitted jobs and stop the sampling thread; idempotent."""
        if self.executor is None:
            return
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.executor = None
        torch.set_num_threads(self.threads_before)

    def _submit_up_to(self, last: int, version: int) -> None:
        """Submit steps ``next_step .. min(last, total_steps)`` on the current weights."""
        while self.next_step <= min(last, self.total_steps):
            step = self.next_step
            model = self.policy
            if self.copies:
                model = self.copies[step % self.lag]
                _load_weights(model, self.policy)
            assert self.executor is not None, "the pipeline is closed"
            self.pending.append((step, self.executor.submit(self._run, step, model, version)))
            self.next_step += 1

    def _run(self, step: int, model: nn.Module, version: int) -> SampledBatch:
        start = time.perf_counter()
        rollout, metrics = self.sample(step - 1, model, version)
        return SampledBatch(step, rollout, metrics, time.perf_counter() - start)


def _done(entry: Future[SampledBatch] | SampledBatch) -> SampledBatch:
    """A pending entry's batch, waiting for its job (its exception raised here)."""
    return entry.result() if isinstance(entry, Future) else entry


def _init_sampling_thread(threads: int, device: torch.device) -> None:
    """The sampling thread's own settings: its intra-op threads, and its current CUDA device
    (per thread: a new thread starts on cuda:0, not the rank's device)."""
    torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)


def _frozen_copy(policy: nn.Module) -> nn.Module:
    """A copy of ``policy`` that samples only: no gradients, evaluation mode."""
    snapshot = copy.deepcopy(policy)
    snapshot.requires_grad_(False)
    return snapshot.eval()


@torch.no_grad()
def _load_weights(snapshot: nn.Module, policy: nn.Module) -> None:
    """Copy every parameter and buffer of ``policy`` into ``snapshot`` (same structure)."""
    source = dict(policy.state_dict(keep_vars=True))
    for name, tensor in snapshot.state_dict(keep_vars=True).items():
        tensor.copy_(source[name])


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
        assert batch.rollout.sample_versions is not None
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


def load_in_flight(file: Path, dist: DistContext, device: torch.device) -> list[SampledBatch]:
    """This rank's in-flight rollouts from a checkpoint's ``in_flight.pt`` (one list per rank).
    Another world size (``ckpt.allow_changes``) cannot take them over: ``CheckpointError``."""
    per_rank = io.load_torch(file)["per_rank"]
    if len(per_rank) != dist.world_size:
        raise CheckpointError(
            f"{file}: in-flight rollouts of {len(per_rank)} rank(s), this run has "
            f"{dist.world_size}: they cannot be shared out again"
        )
    return [batch_from_record(batch, device) for batch in per_rank[dist.rank]]


def batch_from_record(record: dict[str, Any], device: torch.device) -> SampledBatch:
    """A ``batch_record`` back as a ``SampledBatch`` with its tensors on ``device``."""
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
