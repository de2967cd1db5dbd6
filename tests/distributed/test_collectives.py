"""The trainer's collectives work under the process group a CUDA run creates.

No GPU here, so NCCL is stood in for by gloo registered for the same device type: a group whose
backend serves CUDA tensors only (what a plain ``backend="nccl"`` is) fails every CPU tensor the
trainer reduces — the stop vote, logged metrics, object gathers — with "No backend type
associated with device type cpu". ``process_group_backend("cuda")`` must serve CPU tensors too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from omegaconf import OmegaConf
from tests.distributed.ddp_worker import collectives_under, reduce_a_cpu_tensor
from tests.helpers import compose_config

from astrai.distributed import process_group_backend


def cpu_stand_in(backend: str) -> str:
    """``backend`` with gloo in place of NCCL for the same device types: a bare ``nccl``
    serves CUDA only, so it becomes ``cuda:gloo``."""
    entries = []
    for entry in backend.split(","):
        device, _, name = entry.rpartition(":")
        if name == "nccl":
            entries.append(f"{device or 'cuda'}:gloo")
        else:
            entries.append(entry)
    return ",".join(entries)


def test_the_backend_of_a_cuda_run_serves_cpu_tensors() -> None:
    assert process_group_backend("cuda") == "cpu:gloo,cuda:nccl"
    assert process_group_backend("cpu") == "gloo"
    assert cpu_stand_in("nccl") == "cuda:gloo"
    assert cpu_stand_in(process_group_backend("cuda")) == "cpu:gloo,cuda:gloo"


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_a_cuda_only_group_fails_the_trainers_cpu_collectives(tmp_path: Path) -> None:
    # the check below can fail: what `backend="nccl"` did before
    with pytest.raises(Exception, match="No backend type associated with device type cpu"):
        mp.spawn(reduce_a_cpu_tensor, args=(2, "cuda:gloo", str(tmp_path)), nprocs=2, join=True)


@pytest.mark.slow  # ~11 s: two processes, a full RL step and a checkpoint
def test_one_rl_step_stop_vote_and_checkpoint_under_the_cuda_runs_group(tmp_path: Path) -> None:
    cfg = compose_config(
        ["train_type=online_ppo", "debug=quick", "infra.device=cpu", "train_type.minibatches=2"]
    )
    backend = cpu_stand_in(process_group_backend("cuda"))
    resolved = OmegaConf.to_yaml(cfg, resolve=True)
    mp.spawn(collectives_under, args=(2, backend, resolved, str(tmp_path)), nprocs=2, join=True)
    result = torch.load(tmp_path / "result.pt", weights_only=False)
    assert result["stopped"] == "SIGTERM"  # rank 1's signal reached rank 0 through the vote
    assert 0.0 <= result["metrics"]["rollout/accuracy"] <= 1.0
    assert Path(result["checkpoint"]).name == "step_1"
    assert (Path(result["checkpoint"]) / "trainer_state.json").is_file()
