"""Rank discovery: torchrun's variables, Slurm's, and the process count of `auto`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.helpers import compose_config

from astrai.config.command_line import node_rank, torchrun_arguments
from astrai.distributed import (
    apply_slurm_environment,
    env_context,
    first_slurm_host,
    slurm_environment,
)
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
        "MASTER_PORT": "29500",  # no job id: torch's default
    }
    # one port per job: two jobs whose first node is the same host do not collide
    assert slurm_environment({**env, "SLURM_JOB_ID": "123457"})["MASTER_PORT"] == "23457"
    assert slurm_environment({**env, "SLURM_JOB_ID": "20000"})["MASTER_PORT"] == "20000"
    assert slurm_environment({**env, "SLURM_JOB_ID": "1", "MASTER_PORT": "6000"}) == {
        "RANK": "9",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "16",
        "MASTER_ADDR": "gpu03",
        "MASTER_PORT": "6000",  # the user's own stays
    }


def test_a_slurm_task_gets_its_rank_only_under_infra_slurm() -> None:
    task = {"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2",
            "SLURM_JOB_NODELIST": "n7", "SLURM_JOB_ID": "42"}  # fmt: skip
    environ = dict(task)
    apply_slurm_environment("local", environ)  # an sbatch script's own python: a run of its own
    assert environ == task and env_context(environ).is_main
    apply_slurm_environment("slurm", environ)
    assert env_context(environ) == env_context({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    assert (environ["MASTER_ADDR"], environ["MASTER_PORT"]) == ("n7", "20042")


def test_processes_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # the GPU counts below are all
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
    assert torchrun_arguments(argv, {}) == argv
    assert torchrun_arguments(argv, {"WORLD_SIZE": "2", "RANK": "0"}) is None
    fixed = [*argv, "hydra.run.dir=/runs/a"]
    assert torchrun_arguments(fixed, {"WORLD_SIZE": "2", "RANK": "0"}) == fixed
    assert torchrun_arguments(fixed, {"WORLD_SIZE": "2", "RANK": "1"}) == [
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


def test_a_launch_that_narrows_the_gpus_leaves_the_next_job_the_users_selection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sequential sweep runs its jobs in one process: the first job's narrowing to
    ``CUDA_VISIBLE_DEVICES=1,2`` must not be what the second job plans its GPUs from (it would
    refuse ``infra.gpu.devices=[1,2]``: "only 2 GPU(s) are visible")."""
    import torch

    from astrai.training import launch

    seen: list[tuple[str | None, object]] = []

    def fake_launch(cfg, run_dir, nproc, grace_s):  # noqa: ANN001, ANN202 - launch's own
        seen.append((os.environ.get("CUDA_VISIBLE_DEVICES"), cfg.infra.gpu.devices))
        return {"step": 3}

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(launch, "_launch", fake_launch)
    cfg = compose_config(["infra.gpu.devices=[1,2]"], validate=False)
    for before in (None, "0,1,2,3"):
        if before is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", before)
        for _job in range(2):  # two jobs of one sweep, the same selection
            assert launch.launch_workers(cfg, tmp_path) == {"step": 3}
            assert os.environ.get("CUDA_VISIBLE_DEVICES") == before
    # the workers saw the narrowed list each time, and were told to use all of it
    assert seen == [("1,2", "all")] * 4


def test_a_node_other_than_node_0_writes_no_hydra_files_into_the_shared_run_dir() -> None:
    base = ["train.py", "infra.nnodes=2", "hydra.run.dir=/shared/a"]
    assert torchrun_arguments([*base, "infra.node_rank=0"], {}) == [*base, "infra.node_rank=0"]
    assert torchrun_arguments([*base, "infra.node_rank=1"], {}) == [
        *base,
        "infra.node_rank=1",
        "hydra.output_subdir=null",
        "hydra/job_logging=stdout",
    ]
    assert node_rank(["infra.node_rank=1", "++infra.node_rank=3"]) == 3  # the last one counts
    assert node_rank(["seed=1"]) == node_rank(["infra.node_rank=x"]) == 0  # validation names x
