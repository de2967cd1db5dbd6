"""Rank discovery: torchrun's variables, Slurm's, and the process count of `auto`."""

from __future__ import annotations

import pytest
from tests.helpers import compose_config

from astrai.distributed import env_context, first_slurm_host, slurm_environment
from astrai.train import _torchrun_arguments
from astrai.training.launch import inside_worker, processes_per_node


def test_env_context_from_torchrun_variables() -> None:
    ctx = env_context({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.is_main) == (3, 1, 4, False)
    assert env_context({}).world_size == 1 and env_context({}).is_main
    with pytest.raises(RuntimeError, match="RANK=4 WORLD_SIZE=4"):
        env_context({"RANK": "4", "WORLD_SIZE": "4"})


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [("gpu07", "gpu07"), ("gpu[03-05,9]", "gpu03"), ("a1,b2", "a1"), ("n[12,14]", "n12")],
)
def test_first_slurm_host(nodelist: str, host: str) -> None:
    assert first_slurm_host(nodelist) == host


def test_slurm_environment() -> None:
    env = {
        "SLURM_PROCID": "9",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "16",
        "SLURM_JOB_NODELIST": "gpu[03-04]",
    }
    assert slurm_environment(env) == {
        "RANK": "9",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "16",
        "MASTER_ADDR": "gpu03",
        "MASTER_PORT": "29500",
    }


def test_processes_per_node() -> None:
    infra = compose_config(["infra.device=cpu"]).infra
    assert processes_per_node(infra, cuda_count=8) == 1  # CPU: one process unless asked
    gpu = compose_config(["infra.gpu.devices=[0,2]"], validate=False).infra
    assert processes_per_node(gpu, cuda_count=4) == 2
    everything = compose_config(validate=False).infra
    assert processes_per_node(everything, cuda_count=4) == 4
    assert processes_per_node(everything, cuda_count=0) == 1
    explicit = compose_config(["infra.nproc_per_node=3"], validate=False).infra
    assert processes_per_node(explicit, cuda_count=0) == 3
    assert inside_worker({"WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert not inside_worker({})


def test_torchrun_ranks_share_one_run_dir_and_only_rank_0_writes_hydra_files() -> None:
    argv = ["train.py", "seed=1"]
    assert _torchrun_arguments(argv, {}) == argv
    assert _torchrun_arguments(argv, {"WORLD_SIZE": "2", "RANK": "0"}) is None
    fixed = [*argv, "hydra.run.dir=/runs/a"]
    assert _torchrun_arguments(fixed, {"WORLD_SIZE": "2", "RANK": "0"}) == fixed
    assert _torchrun_arguments(fixed, {"WORLD_SIZE": "2", "RANK": "1"}) == [
        *fixed,
        "hydra.output_subdir=null",
        "hydra/job_logging=stdout",
    ]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["infra.nproc_per_node=3"], "divisible by the number of processes (3"),
        (["infra.nproc_per_node=2", "train_type.minibatches=512"], "must divide each process's"),
        (["infra.nnodes=2"], "infra.rdzv_endpoint"),
        (["infra.node_rank=1"], "infra.node_rank"),
    ],
)
def test_bad_process_layouts_are_config_errors(overrides: list[str], needle: str) -> None:
    from astrai.config.validate import ConfigError

    # on the CPU: with CUDA present, `device=auto` would first check one GPU per process
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        compose_config(["infra.device=cpu", *overrides])
