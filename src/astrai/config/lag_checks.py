"""Checks of ``train_type.max_policy_lag`` (``training.sampling.overlap``): rollouts that overlap
the update train samples an older policy drew, so they need the decoupled correction, and the
sampling thread must not need collectives of its own. Before anything starts. Then the lag
plan is recorded in the config (``record_lag_plan``): the saved ``config.yaml`` says what ran."""

from __future__ import annotations

from omegaconf import DictConfig, read_write

from astrai.config.errors import require
from astrai.config.ranges import check_number
from astrai.policy_lag import configured_lag, lag_plan

LAG_KEY = "train_type.max_policy_lag"
# each step of lag is one more copy of the policy's weights held for sampling: a typo (100)
# must not fill the machine's memory; trainer.allow_large lifts it
MAX_LAG = 8
MAX_LAG_LARGE = 1000


def validate_policy_lag(cfg: DictConfig) -> None:
    """``train_type.max_policy_lag``: an integer in [0, 8] (1000 with trainer.allow_large);
    above 0, the trainer's own π_old (``engine.old_logprobs=recompute``) and an importance
    correction (``engine.correction``) that weights each token by π_old / π_behav, as in
    decoupled PPO: what ``auto`` chooses (``astrai.policy_lag``); an explicit choice that
    contradicts it (``bypass``, ``none``) is refused."""
    plan = lag_plan(cfg)
    configured = plan.configured
    high = MAX_LAG_LARGE if cfg.trainer.allow_large else MAX_LAG
    check_number(configured.max_policy_lag, LAG_KEY, 0, high, integer=True)
    lag = plan.max_policy_lag
    if lag == 0:
        return
    require(
        plan.recomputes and plan.correction != "none",
        f"{LAG_KEY}={lag} trains samples an older policy drew: it needs the correction, "
        "engine.old_logprobs=recompute and an engine.correction (auto chooses token_truncate); "
        f"got engine.old_logprobs={configured.old_logprobs}, "
        f"engine.correction={configured.correction} (docs/async.md)",
    )
    if isinstance(cfg.infra.nproc_per_node, int):  # auto: the trainer checks the real count
        check_lag_world(
            cfg.train_type, cfg.infra.nproc_per_node * cfg.infra.nnodes, cfg.infra.parallel
        )


def check_lag_world(tt: DictConfig, world_size: int, parallel: str) -> None:
    """Under torchrun the sampling thread samples each rank's own share with no collective:
    refused where it would need one (a sharded policy's sampling, dynamic sampling's counts
    summed over the ranks), which would interleave with the update's."""
    lag = configured_lag(tt)
    if lag == 0 or world_size == 1:
        return
    require(
        parallel != "fsdp",
        f"{LAG_KEY}={lag} samples a full copy of the weights on each rank: infra.parallel=fsdp "
        f"shards them over the {world_size} processes (use infra.parallel=ddp, or lag 0)",
    )
    require(
        not tt.filter_groups,
        f"{LAG_KEY}={lag} with train_type.filter_groups over {world_size} processes: dynamic "
        "sampling sums its counts over the ranks, a collective the sampling thread would run "
        "beside the update's (use one process, or lag 0)",
    )


def record_lag_plan(cfg: DictConfig) -> None:
    """Write the lag plan's choices (``astrai.policy_lag.lag_plan``) into a validated ``cfg``
    in place of ``auto``: ``engine.old_logprobs`` and ``engine.correction`` say what the run
    uses, in the run dir's and every checkpoint's ``config.yaml``. Idempotent: an explicit
    choice is written back as it was, so recording a recorded config changes nothing."""
    plan = lag_plan(cfg)
    engine = cfg.engine
    with read_write(engine):
        engine.old_logprobs = plan.old_logprobs
        engine.correction = plan.correction
