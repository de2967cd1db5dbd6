"""Issue 19's options through the real trainer: what they log, the loss mask of
``mask_truncated``, dynamic sampling's step shape, and one-line config errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from tests.helpers import compose_config

from astrai.algorithms.grpo import GRPOStrategy
from astrai.config.errors import ConfigError
from astrai.config.validate import validate_config
from astrai.metrics.names import OPTION_METRICS, emitted_metrics, reward_term_names
from astrai.rollout.rollout import ended_with_eos
from astrai.training.run import Run

SMALL = [
    "debug=quick",
    "trainer.total_steps=2",
    "train_type.prompts_per_step=4",
    "train_type.group_size=4",
    "train_type.minibatches=2",
    "logger.tensorboard=false",
]
ON = [
    "train_type.clip_ratio_c=3",
    "train_type.filter_groups=true",
    "train_type.max_resample_rounds=1",
    "train_type.mask_truncated=true",
    "train_type.loss_agg=seq_mean_token_sum_norm",
]


@pytest.mark.parametrize(
    ("train_type", "advantage"), [("online_grpo", "rloo"), ("online_ppo", "gae")]
)
def test_options_log_their_documented_metrics(
    tmp_path: Path, train_type: str, advantage: str
) -> None:
    cfg = compose_config(
        [f"train_type={train_type}", f"train_type.advantage={advantage}", *SMALL, *ON]
    )
    trainer = Run(cfg, tmp_path)
    trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    emitted = set().union(*(row.keys() for row in rows)) - {"step"}
    expected = emitted_metrics(trainer.parts.strategy.metric_names, cfg.train_type)
    assert set(OPTION_METRICS) <= expected
    assert emitted - reward_term_names(emitted) == expected
    for row in rows[1:]:  # every training step says how it sampled
        assert row["rollout/resample_rounds"] in (0.0, 1.0)
        assert 0 <= row["rollout/filtered_groups"] <= 4 * (1 + row["rollout/resample_rounds"])


def test_default_job_emits_no_option_metric() -> None:
    cfg = compose_config(SMALL)
    assert not set(OPTION_METRICS) & emitted_metrics(GRPOStrategy.metric_names, cfg.train_type)


def test_dynamic_sampling_keeps_the_step_shape(tmp_path: Path) -> None:
    trainer = Run(compose_config([*SMALL, *ON]), tmp_path)
    rollout = trainer.trainer.rollout()
    assert rollout.rewards.shape == (4, 4) and len(rollout.prompts) == 4
    assert trainer.started.rollouts.sampling_metrics["rollout/resample_rounds"] in (0.0, 1.0)


def test_mask_truncated_leaves_cut_responses_out_of_the_loss(tmp_path: Path) -> None:
    # max_new_tokens=3 is too short for most answers of the random policy: some are cut
    trainer = Run(
        compose_config(
            [*SMALL, "train_type.mask_truncated=true", "train_type.sampling.max_new_tokens=3"]
        ),
        tmp_path,
    )
    rollout = trainer.trainer.rollout()
    ends = ended_with_eos(
        rollout.response_ids, rollout.response_mask, trainer.parts.tokenizer.eos_id
    )
    assert not ends.all()  # the check below means something
    assert rollout.loss_mask is not None  # the collector applied it (rollout.collectors)
    trainer.trainer.prepare(rollout)
    assert torch.equal(rollout.loss_mask, rollout.response_mask & ends[..., None])
    assert not rollout.loss_mask[~ends].any()


@pytest.fixture(scope="module")
def composed() -> DictConfig:
    """The default job, composed once (each case below edits a copy and validates it)."""
    return compose_config(validate=False)


def _validate_with(cfg: DictConfig, **train_type: object) -> None:
    edited = copy.deepcopy(cfg)
    for key, value in train_type.items():
        OmegaConf.update(edited, f"train_type.{key}", value)
    validate_config(edited)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("advantage", "gae", "train_type.advantage must be one of grpo, dr_grpo"),
        ("loss_agg", "seq_mean", "train_type.loss_agg must be one of token_mean"),
        ("ratio_level", "group", "train_type.ratio_level must be one of token, sequence"),
        ("clip_eps_low", 1.5, "train_type.clip_eps_low must be null or in (0, 1)"),
        ("clip_eps_high", 0.0, "train_type.clip_eps_high must be null or > 0"),
        ("clip_ratio_c", 1.0, "train_type.clip_ratio_c must be null or > 1"),
        ("max_resample_rounds", -1, "train_type.max_resample_rounds must be >= 0"),
        ("scale_rewards", "std", "train_type.scale_rewards must be one of group"),
    ],
)
def test_bad_option_values_are_one_line_errors(
    composed: DictConfig, key: str, value: object, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _validate_with(composed, **{key: value})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_scale_rewards_belongs_to_grpo_advantages_only(composed: DictConfig) -> None:
    with pytest.raises(ConfigError, match="scale_rewards=batch applies to advantage=grpo only"):
        _validate_with(composed, advantage="rloo", scale_rewards="batch")
    _validate_with(composed, advantage="grpo", scale_rewards="batch")  # fine


def test_ppo_has_only_the_gae_estimator() -> None:
    with pytest.raises(ConfigError, match="advantage must be one of gae"):
        compose_config(["train_type=online_ppo", "train_type.advantage=rloo"])
