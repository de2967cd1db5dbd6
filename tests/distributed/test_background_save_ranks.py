"""A background checkpoint write that fails on rank 0 (``training.background_save``) is raised
on every rank at the wait for it, so no rank goes on to a collective the others never join."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.multiprocessing as mp
from omegaconf import OmegaConf
from tests.distributed.ddp_worker import background_write_fails
from tests.helpers import compose_config


@pytest.mark.slow  # ~10 s: two processes, an RL step and a checkpoint
def test_a_failed_background_write_is_raised_on_every_rank(tmp_path: Path) -> None:
    cfg = compose_config(["debug=quick", "infra.device=cpu"])
    resolved = OmegaConf.to_yaml(cfg, resolve=True)
    mp.spawn(background_write_fails, args=(2, resolved, str(tmp_path)), nprocs=2, join=True)
    root = tmp_path / "run" / "checkpoints"
    rank0, rank1 = ((tmp_path / f"rank{r}.txt").read_text() for r in (0, 1))
    # the checkpoint's final name, not its temporary's (removed by then)
    assert rank0 == f"OSError: {root / 'step_1' / 'optimizer.pt'}: No space left on device"
    assert rank1 == f"CheckpointError: rank 0 failed to write {root / 'step_1'}"
    assert sorted(p.name for p in root.iterdir()) == ["reference.safetensors"]
