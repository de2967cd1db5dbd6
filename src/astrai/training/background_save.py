"""Checkpoints written off the training step (``ckpt.background``): at the save the state is
copied to host memory (``checkpoints.snapshot.host_snapshot``), then one thread writes the
files, renames the directory and prunes beyond ``ckpt.keep_last`` while training goes on.

At most one write is in flight: each save, the end of the run and ``Trainer.close`` first wait
for the previous one. A failed background write is raised at that wait, on the trainer's
thread, as the exception a save made at once raises (an ``OSError`` naming the file); under
torch.distributed the ranks agree on it there (``checkpoint_files.agree_on_failure``), so no
rank waits forever. A crash mid-write leaves only ``io.write_checkpoint``'s temporary
directory, which no reader takes for a checkpoint: the previous complete one is resumed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from astrai.checkpoints import io
from astrai.checkpoints.snapshot import HostBuffers, host_snapshot
from astrai.files import FileWriter
from astrai.training.checkpoint_files import (
    agree_on_failure,
    checkpoint_path,
    checkpoint_writers,
    gather_checkpoint_state,
    prepare_checkpoints_root,
    save_training_checkpoint,
)
from astrai.training.checkpointing import CheckpointedObjects
from astrai.training.state import TrainState

log = logging.getLogger(__name__)

T = TypeVar("T")


class CheckpointWrites:
    """A run's checkpoint saves, with at most one written in the background at a time.

    ``save`` (every rank) writes a checkpoint at once or, with ``background``, hands rank 0's
    host snapshot to a writer thread and returns; ``wait`` (every rank) waits for that write
    and raises its failure on every rank.
    """

    def __init__(self) -> None:
        self._pending: Path | None = None  # a background save's checkpoint, on every rank
        self._thread: threading.Thread | None = None  # rank 0's writer
        self._failure: BaseException | None = None  # rank 0: what its save or writer raised
        # rank 0: the last snapshot's host memory, the next one's (a full copy of the state)
        self._buffers = HostBuffers()

    def save(self, parts: CheckpointedObjects, state: TrainState, background: bool) -> Path:
        """The checkpoint of ``state`` at ``<run dir>/checkpoints/step_<N>/``, pruned to
        ``ckpt.keep_last`` after it; returns its path. ``background``: returns once the state
        is copied (the step waits for the copy only); the directory appears when the write
        ends, which ``wait`` waits for."""
        self.wait()
        keep_last = int(parts.cfg.ckpt.keep_last)
        if not background:
            path = save_training_checkpoint(parts, state)
            if parts.dist.is_main:
                io.prune_checkpoints(path.parent, keep_last)
            return path
        gathered = gather_checkpoint_state(parts, state)  # collectives: every rank
        path = self._pending = checkpoint_path(parts, state.step)
        if not parts.dist.is_main:
            return path
        self._buffers.reuse()  # the last write is over (``wait`` above)
        try:
            root = prepare_checkpoints_root(parts)  # the reference: the first save only
            writers = checkpoint_writers(parts, state, gathered, copy=self._snapshot)
        except Exception as err:  # raised at the wait, where the ranks agree on it
            self._failure = err
            return path
        self._thread = threading.Thread(
            target=self._write,
            args=(root, state.step, writers, keep_last),
            name="astrai-checkpoint-write",
            # a hard exit (a second signal) need not wait for it: what it leaves is a temporary
            daemon=True,
        )
        self._thread.start()
        return path

    def _snapshot(self, value: T) -> T:
        return host_snapshot(value, self._buffers)

    def _write(
        self, root: Path, step: int, writers: Mapping[str, FileWriter], keep_last: int
    ) -> None:
        try:
            io.write_checkpoint(root, step, writers)
            io.prune_checkpoints(root, keep_last)
        except BaseException as err:  # handed to the trainer's thread at the wait
            self._failure = err

    def wait(self) -> None:
        """Every rank: the background write in flight, if any, done; its failure (rank 0's)
        raised on every rank, rank 0's own exception there."""
        path, self._pending = self._pending, None
        if path is None:
            return
        agree_on_failure(self._join(), path)

    def close(self) -> None:
        """Wait for a write in flight without the ranks' agreement (the run may be ending on an
        error of its own, another rank gone): its failure is logged, not raised."""
        path, self._pending = self._pending, None
        failure = self._join()
        self._buffers = HostBuffers()  # the run's copy of its state, let go
        if failure is not None:
            log.error("checkpoint %s was not written: %s", path, failure)

    def _join(self) -> BaseException | None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        failure, self._failure = self._failure, None
        return failure
