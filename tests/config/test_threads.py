"""``infra.num_threads``: parsing, the launcher's parallel jobs, ``auto`` resolved per job, and
the one-line errors that name the key."""

from __future__ import annotations

import pytest
import torch
from tests.helpers import compose_config

from astrai.config.errors import ConfigError
from astrai.config.threads import (
    joblib_parallel_jobs,
    launcher_parallel_jobs,
    parse_num_threads,
    resolve_num_threads,
)
from astrai.config.validate import validate_config
from astrai.training.setup import TORCH_DEFAULT_THREADS, apply_num_threads

JOBLIB = {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"}
BASIC = {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}


@pytest.mark.parametrize(
    ("setting", "cores", "parallel_jobs", "default", "threads"),
    [
        ("auto", 2, 1, 2, 2),  # a job alone: torch's default, whatever the cores
        ("auto", 16, 1, 8, 8),  # (torch may count physical cores: 8 of 16 logical)
        ("auto", 2, 2, 2, 1),  # 2 // 2
        ("auto", 16, 3, 8, 5),  # 16 // 3, rounded down
        ("auto", 2, 4, 2, 1),  # more jobs than cores: never below 1
        (1, 16, 1, 8, 1),  # a number is used as it is
        (3, 2, 2, 2, 3),  # even beyond cores // jobs
    ],
)
def test_resolve_num_threads(
    setting: object, cores: int, parallel_jobs: int, default: int, threads: int
) -> None:
    assert resolve_num_threads(setting, cores, parallel_jobs, default) == threads


@pytest.mark.parametrize(
    ("n_jobs", "cores", "jobs"),
    [(None, 8, 1), (1, 8, 1), (2, 8, 2), (12, 8, 12), (-1, 8, 8), (-2, 8, 7), (-9, 8, 1)],
)
def test_joblib_parallel_jobs_follows_joblibs_convention(
    n_jobs: int | None, cores: int, jobs: int
) -> None:
    assert joblib_parallel_jobs(n_jobs, cores) == jobs


def test_only_a_multirun_launcher_with_n_jobs_runs_jobs_side_by_side() -> None:
    assert launcher_parallel_jobs({**JOBLIB, "n_jobs": 2}, multirun=True, cores=8) == 2
    assert launcher_parallel_jobs({**JOBLIB, "n_jobs": -1}, multirun=True, cores=8) == 8
    # Hydra ignores hydra/launcher outside a multirun: the job runs alone, in-process
    assert launcher_parallel_jobs({**JOBLIB, "n_jobs": 2}, multirun=False, cores=8) == 1
    assert launcher_parallel_jobs(BASIC, multirun=True, cores=8) == 1


@pytest.mark.parametrize("value", [0, -1, "four", "2", 1.5, True, None])
def test_parse_num_threads_rejects(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^infra\.num_threads must be 'auto' or an integer >= 1"):
        parse_num_threads(value)


@pytest.mark.parametrize("override", ["infra.num_threads=0", "infra.num_threads=many"])
def test_validate_config_names_the_key(override: str) -> None:
    cfg = compose_config([override], validate=False)
    with pytest.raises(ConfigError, match=r"infra\.num_threads") as err:
        validate_config(cfg)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("infra", ["local", "docker", "slurm"])
def test_the_default_is_auto_in_every_infra(infra: str) -> None:
    assert compose_config([f"infra={infra}"], validate=False).infra.num_threads == "auto"


def test_a_number_composes() -> None:
    assert compose_config(["infra.num_threads=3"]).infra.num_threads == 3


def test_apply_num_threads_sets_torch_and_auto_restores_its_default() -> None:
    try:
        assert apply_num_threads(1) == 1
        assert torch.get_num_threads() == 1
        # a later job of the same multirun process: auto is torch's own default again
        assert apply_num_threads("auto") == TORCH_DEFAULT_THREADS
        assert torch.get_num_threads() == TORCH_DEFAULT_THREADS
    finally:
        torch.set_num_threads(TORCH_DEFAULT_THREADS)
