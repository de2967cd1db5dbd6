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

Stopping (``training.stopping``): a stop never waits for an unfinished rollout. The training
thread's wait (``take``) is interruptible in one process; a checkpoint's wait (``settle``)
ends once a stop is asked for, keeps the rollouts sampled, and saves each unfinished one as a
``Reissue`` (its snapshot's weights and version) with the sampling stream rewound to before the
first of them, so the checkpoint counts only what ``in_flight.pt`` holds and a resume samples
them again exactly. A reward call blocked on the sampling thread is ended by killing its reward
worker (``abandon_reward_calls``), a wait for an environment step by ``StepsAbandoned``
(``abandon_steps_of``); the thread is a daemon (``sampling_thread``), so a job still
blocked never holds the process's exit.

Threads: each side runs on half of ``infra.num_threads`` (at least one each; torch's intra-op
count is kept per thread once a thread has run an op, so the two are set one by one).
"""

from __future__ import annotations

import copy
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import torch
from torch import nn

from astrai.distributed import all_reduce_max
from astrai.rollout.rollout import Rollout
from astrai.signal_handlers import WAIT_SLICE_S
from astrai.training.sampling.cuda_streams import hand_over
from astrai.training.sampling.in_flight import Reissue, SampledBatch
from astrai.training.sampling.sampling_thread import SamplingThread
from astrai.training.stopping import interruptible, stop_requested

log = logging.getLogger(__name__)

# how long a stop waits for an abandoned job (its reward calls ended: ``RewardCallAbandoned``
# within ~1 s)
ABANDON_WAIT_S = 2.0


# (the step's index: steps completed when it trains; the model to sample with; its version)
SampleFn = Callable[[int, nn.Module, int], tuple[Rollout, dict[str, float]]]


def split_threads(total: int) -> int:
    """Intra-op threads of each side (sampling, updating) when ``total`` are the job's."""
    return max(1, total // 2)


class RolloutPipeline:
    """The rollouts of the next ``lag`` steps, sampled on a background thread.

    Stopping (``training.stopping``): the training thread's wait for a rollout (``take``) is
    interruptible in one process; a checkpoint's wait (``settle``) ends as soon as a stop is
    asked for, and the rollouts not finished by then are abandoned: each becomes a
    ``Reissue`` (the weights it was submitted with, its version) and the sampling stream is
    rewound to where the first of them began (``Settled.stream_state``), so the checkpoint
    reads "not yet sampled" and a resume samples them again exactly as the straight run did.

    Args:
        sample: ``sample(index, model, version)`` -> (rollout, metrics): the rollout trained at
            step ``index + 1``, sampled with ``model`` (the policy's weights at ``version``).
        policy: the live policy (what snapshots copy).
        lag: ``train_type.max_policy_lag`` (>= 1).
        total_steps: the run's last step; nothing beyond it is sampled.
        snapshots: whether the engine samples the model it is given (``engine=torch``: a
            snapshot per job) or keeps its own weights (vLLM: no copy).
        stream: the random stream the jobs draw from (rewound when jobs are abandoned).
        abandonable: whether a stop signal may abandon the training thread's wait for a
            rollout (one process; ranks abandoning at different points would leave a
            collective waiting).
    """

    def __init__(
        self,
        sample: SampleFn,
        policy: nn.Module,
        lag: int,
        total_steps: int,
        snapshots: bool = True,
        stream: torch.Generator | None = None,
        abandonable: bool = False,
    ) -> None:
        if lag < 1:
            raise ValueError("a RolloutPipeline overlaps at least one step (max_policy_lag >= 1)")
        self.sample = sample
        self.policy = policy
        self.lag = lag
        self.total_steps = total_steps
        self.stream = stream
        self.abandonable = abandonable
        self.copies: list[nn.Module] = []
        if snapshots:
            self.copies = [_frozen_copy(policy) for _ in range(lag)]
        self.pending: deque[tuple[int, Future[SampledBatch] | SampledBatch]] = deque()
        self.next_step = 1  # the next step whose rollout is not yet submitted
        self.versions: dict[int, int] = {}  # step -> the policy version it was submitted on
        self.stream_before: dict[int, torch.Tensor] = {}  # step -> the stream as its job began
        self.abandoned: Settled | None = None  # what a stop abandoned (then no more jobs)
        # torch's intra-op thread count is per thread once it has run an op: each side runs
        # on half of the job's (at least one each) while the pipeline exists
        self.threads_before = torch.get_num_threads()
        threads = split_threads(self.threads_before)
        torch.set_num_threads(threads)
        device = next(policy.parameters()).device
        self.thread: SamplingThread | None = SamplingThread(threads, device, self._began)

    def restore(
        self, batches: list[SampledBatch], next_step: int, reissue: list[Reissue] | None = None
    ) -> None:
        """Continue a run at ``next_step``: ``batches`` are its in-flight rollouts (a
        checkpoint's), the steps ``next_step, next_step + 1, ...``; ``reissue``, the steps after
        them a stop abandoned, submitted again now with the weights and version they had."""
        self.pending = deque((batch.step, batch) for batch in batches)
        self.next_step = next_step + len(batches)
        for job in reissue or []:
            if job.step != self.next_step:  # the checkpoint's order is the loop's
                raise RuntimeError(f"re-issued step {job.step}, expected {self.next_step}")
            model = self.policy
            if self.copies:
                model = self.copies[job.step % self.lag]
                if job.weights is not None:
                    _load_tensors(model, job.weights)
                else:
                    _load_weights(model, self.policy)
            self._submit(job.step, model, job.version)

    def take(self, step: int, version: int) -> SampledBatch:
        """The rollout of ``step`` (waiting for it; a stop signal abandons the wait in one
        process: ``StopInterrupt``, the rollout stays in flight), after submitting every step
        up to ``step + lag`` on the policy's current weights (``version``)."""
        if self.abandoned is not None:
            raise RuntimeError("the rollouts in flight were abandoned by a stop")
        if not self.pending:  # a fresh start (or a resume with none in flight): sample it now
            self._submit_up_to(step, version)
        entry_step, entry = self.pending[0]
        if entry_step != step:  # the schedule is the loop's; a mismatch is a bug, said early
            raise RuntimeError(f"the rollout in flight is step {entry_step}'s, not step {step}'s")
        with interruptible(self.abandonable):
            batch = _wait_for(entry)
        self.pending.popleft()
        self.stream_before.pop(step, None)
        self.versions.pop(step, None)
        self._submit_up_to(step + self.lag, version)
        return batch

    def settle(self) -> Settled:
        """Wait for every submitted rollout, unless a stop is asked for (a signal, the time
        budget) first or while waiting: then those not finished are abandoned (``Reissue``).
        Every rank keeps as many as the rank that finished fewest. What a checkpoint saves."""
        if self.abandoned is not None:
            return self.abandoned
        entries = list(self.pending)
        done = len(entries)
        for index, (_, entry) in enumerate(entries):
            if not _wait_unless_stopped(entry):
                done = index
                break
        keep = int(-all_reduce_max(-float(done)))  # the ranks agree (one rank: itself)
        if keep == len(entries):
            return Settled([_done(entry) for _, entry in entries])
        return self._abandon(entries, keep)

    def before_weight_sync(self) -> None:
        """An engine with its own weights (no snapshots) is loaded with the update only once
        its jobs, drawn on the weights they were submitted with, are done (or abandoned)."""
        if not self.copies:
            self.settle()

    def close(self) -> None:
        """Stop the sampling thread; idempotent. A job still running is abandoned (its reward
        calls and environment steps ended) and waited for ``ABANDON_WAIT_S`` at most: a run's
        end never hangs on it."""
        if self.thread is None:
            return
        if any(isinstance(e, Future) and not e.done() for _, e in self.pending):
            for _, entry in self.pending:
                if isinstance(entry, Future):
                    entry.cancel()
            self.thread.abandon_running_job()
        self.thread.close(ABANDON_WAIT_S)
        self.thread = None
        torch.set_num_threads(self.threads_before)

    def _abandon(
        self, entries: list[tuple[int, Future[SampledBatch] | SampledBatch]], keep: int
    ) -> Settled:
        """Keep the first ``keep`` entries (done); abandon the rest: not-started jobs are
        cancelled, a running one's reward calls are ended (it is not waited for: the stream
        state saved is the one before it, whatever it draws after)."""
        assert self.thread is not None, "the pipeline is closed"
        abandoned = entries[keep:]
        first = abandoned[0][0]
        running = False
        with self.thread.lock:  # no job starts while this runs
            for _, entry in abandoned:
                if isinstance(entry, Future) and not entry.cancel():
                    running = running or not entry.done()
            if first in self.stream_before:  # it began: the stream as it was then
                stream_state = self.stream_before[first]
            else:  # never began: every job before it is done and none runs
                assert self.stream is not None, "a pipeline that abandons jobs needs its stream"
                stream_state = self.stream.get_state()
        if running:
            self.thread.abandon_running_job()
        reissue = [
            Reissue(step, self.versions[step], self._weights_of(step)) for step, _ in abandoned
        ]
        self.abandoned = Settled(
            [_done(entry) for _, entry in entries[:keep]], reissue, stream_state.clone()
        )
        self.pending = deque(entries[:keep])
        log.warning(
            "stop: the rollout%s of step%s %s, not finished, %s abandoned (re-sampled on resume)",
            "s" if len(reissue) > 1 else "",
            "s" if len(reissue) > 1 else "",
            ", ".join(str(job.step) for job in reissue),
            "are" if len(reissue) > 1 else "is",
        )
        return self.abandoned

    def _weights_of(self, step: int) -> dict[str, torch.Tensor] | None:
        """The trainable tensors of the snapshot ``step`` samples with (on the CPU); None for
        an engine with its own weights (its re-issue samples the weights then current)."""
        if not self.copies:
            return None
        snapshot = dict(self.copies[step % self.lag].named_parameters())
        return {
            name: snapshot[name].detach().cpu().clone()
            for name, parameter in self.policy.named_parameters()
            if parameter.requires_grad
        }

    def _submit_up_to(self, last: int, version: int) -> None:
        """Submit steps ``next_step .. min(last, total_steps)`` on the current weights."""
        while self.next_step <= min(last, self.total_steps):
            step = self.next_step
            model = self.policy
            if self.copies:
                model = self.copies[step % self.lag]
                _load_weights(model, self.policy)
            self._submit(step, model, version)

    def _submit(self, step: int, model: nn.Module, version: int) -> None:
        assert self.thread is not None, "the pipeline is closed"
        self.versions[step] = version
        self.pending.append((step, self.thread.submit(self._run, step, model, version)))
        self.next_step = step + 1

    def _began(self, step: int) -> None:
        """On the sampling thread, as ``step``'s job begins (under ``SamplingThread.lock``)."""
        if self.stream is not None:
            self.stream_before[step] = self.stream.get_state()

    def _run(self, step: int, model: nn.Module, version: int) -> SampledBatch:
        start = time.perf_counter()
        rollout, metrics = self.sample(step - 1, model, version)
        return SampledBatch(step, rollout, metrics, time.perf_counter() - start)


@dataclass
class Settled:
    """The rollouts in flight at a checkpoint: ``batches``, sampled (in step order), then
    ``reissue``, abandoned unsampled; ``stream_state``: the sampling stream's state before the
    first re-issued step (None: the live stream is right)."""

    batches: list[SampledBatch]
    reissue: list[Reissue] = field(default_factory=list)
    stream_state: torch.Tensor | None = None


def _wait_for(entry: Future[SampledBatch] | SampledBatch) -> SampledBatch:
    """A pending entry's batch, waiting for its job in slices (so a stop signal's handler
    runs and may raise), its exception raised here."""
    if isinstance(entry, SampledBatch):
        return entry
    while True:
        try:
            batch = entry.result(timeout=WAIT_SLICE_S)
        except FutureTimeout:
            continue
        hand_over(batch)  # made on the sampling thread's stream, read on this one's
        return batch


def _wait_unless_stopped(entry: Future[SampledBatch] | SampledBatch) -> bool:
    """Wait for ``entry``'s job; False (without waiting further) once a stop is asked for."""
    if isinstance(entry, SampledBatch):
        return True
    while not entry.done():
        if stop_requested():
            return False
        wait([entry], timeout=WAIT_SLICE_S)
    return True


def _done(entry: Future[SampledBatch] | SampledBatch) -> SampledBatch:
    """A pending entry's batch, waiting for its job (its exception raised here)."""
    if isinstance(entry, SampledBatch):
        return entry
    batch = entry.result()
    hand_over(batch)  # made on the sampling thread's stream, read on this one's
    return batch


def _frozen_copy(policy: nn.Module) -> nn.Module:
    """A copy of ``policy`` that samples only: no gradients, evaluation mode. Its frozen
    parameters are the policy's own (under ``model.lora`` the whole base: a snapshot then
    holds the adapters, not 34× their size); what the update changes is copied."""
    shared = {id(p): p for p in policy.parameters() if not p.requires_grad}
    snapshot = copy.deepcopy(policy, memo=shared)
    snapshot.requires_grad_(False)
    return snapshot.eval()


@torch.no_grad()
def _load_tensors(snapshot: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Copy ``tensors`` (a ``Reissue``'s) into ``snapshot``'s parameters of those names."""
    parameters = dict(snapshot.named_parameters())
    for name, tensor in tensors.items():
        parameters[name].copy_(tensor)


@torch.no_grad()
def _load_weights(snapshot: nn.Module, policy: nn.Module) -> None:
    """Copy every parameter and buffer of ``policy`` into ``snapshot`` (same structure), but
    those the two share (``_frozen_copy``: the frozen ones)."""
    source = dict(policy.state_dict(keep_vars=True))
    for name, tensor in snapshot.state_dict(keep_vars=True).items():
        if tensor is not source[name]:
            tensor.copy_(source[name])
