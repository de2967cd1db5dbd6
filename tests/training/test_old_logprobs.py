"""Where π_old comes from (``engine.old_logprobs``) and the mismatch correction, through the
real trainer: with astrai's own sampler the mismatch metrics read ≈ 0 on every step, and an
engine whose logprobs are off shows it in the metrics without it reaching the PPO ratio."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config

from astrai.config.errors import ConfigError
from astrai.metrics.names import MISMATCH_METRICS, emitted_metrics, reward_term_names
from astrai.policy_lag import lag_plan
from astrai.rollout.engines.engine import TorchEngine
from astrai.rollout.engines.sampler import Generation
from astrai.training.run import Run

JOB = ["debug=quick", "trainer.total_steps=3", "logger.tensorboard=false"]
RECOMPUTE = ["engine.old_logprobs=recompute", "engine.correction=token_truncate"]
# the sampler (KV cache, one token at a time) against the trainer's full forward, fp32: the
# largest |Δ logprob| measured on these runs was below 1e-6
SAMPLER_BOUND = 1e-5


def _rows(run_dir: Path) -> list[dict[str, float]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if "rollout/reward_mean" in row]


@pytest.mark.parametrize("train_type", ["online_grpo", "online_ppo"])
def test_the_torch_sampler_shows_no_mismatch_on_any_step(tmp_path: Path, train_type: str) -> None:
    cfg = compose_config([f"train_type={train_type}", *JOB, *RECOMPUTE])
    trainer = Run(cfg, tmp_path)
    trainer.fit()
    rows = _rows(tmp_path)
    assert len(rows) == 3
    emitted = set().union(*(row.keys() for row in _rows(tmp_path))) - {"step"}
    expected = emitted_metrics(trainer.parts.strategy.metric_names, cfg.train_type, lag_plan(cfg))
    assert MISMATCH_METRICS <= expected
    assert emitted - reward_term_names(emitted) - {"time/eval_s"} <= expected
    assert MISMATCH_METRICS <= emitted
    for row in rows:
        assert row["rollout/logprob_diff_max"] < SAMPLER_BOUND
        assert row["rollout/logprob_diff_mean"] <= row["rollout/logprob_diff_max"]
        assert row["rollout/mismatch_kl"] < SAMPLER_BOUND**2
        assert 1 - SAMPLER_BOUND < row["rollout/is_ratio_min"] <= row["rollout/is_ratio_max"]
        assert row["rollout/is_ratio_max"] < 1 + SAMPLER_BOUND
        assert row["rollout/is_masked_frac"] == 0.0


def test_the_default_torch_job_trusts_its_sampler_and_logs_no_mismatch(tmp_path: Path) -> None:
    cfg = compose_config(JOB, validate=False)
    assert (cfg.engine.old_logprobs, cfg.engine.correction) == ("auto", "auto")
    plan = lag_plan(cfg)
    assert (plan.old_logprobs, plan.correction) == ("bypass", "none")
    assert not MISMATCH_METRICS & emitted_metrics(frozenset(), cfg.train_type, plan)


class _OffByOneNat(TorchEngine):
    """The torch sampler reporting every sampled token's logprob 1 nat too high: an engine
    whose numerics disagree with the trainer's."""

    def sample(self, *args: object, **kwargs: object) -> Generation:
        gen = super().sample(*args, **kwargs)  # type: ignore[arg-type]
        gen.logprobs = (gen.logprobs + 1.0) * gen.response_mask
        return gen


def _first_step(tmp_path: Path, overrides: list[str]) -> dict[str, float]:
    # rewards that vary within every group by construction: advantages of +-1, so a policy
    # loss of 0 is the correction's doing, not that of a batch of all-zero rewards
    cfg = compose_config([*JOB, "trainer.total_steps=1", *ALTERNATING, *overrides])
    trainer = Run(cfg, tmp_path)
    engine = _OffByOneNat(None, trainer.parts.policy, trainer.parts.tokenizer)
    # the step's and the sampler's engine (a started run's record is frozen: swapped here only)
    object.__setattr__(trainer.started, "engine", engine)
    trainer.started.rollouts.engine = engine
    trainer.fit()
    return _rows(tmp_path)[0]


def test_a_recomputed_pi_old_keeps_the_engines_error_out_of_the_ratio(tmp_path: Path) -> None:
    # one epoch, one minibatch: the update's first forward is π_old itself
    one_pass = ["train_type.ppo_epochs=1", "train_type.minibatches=1"]
    icepop = ["engine.old_logprobs=recompute", "engine.correction=icepop"]
    row = _first_step(tmp_path / "recompute", [*one_pass, *icepop])
    assert row["rollout/logprob_diff_mean"] == pytest.approx(1.0, abs=1e-5)
    assert row["rollout/is_ratio_max"] == pytest.approx(math.exp(-1.0), rel=1e-4)
    assert row["rollout/is_masked_frac"] == 1.0  # e^-1 is below IcePop's 0.5: all leave
    assert row["policy/approx_kl"] < 1e-10 and row["loss/policy"] == 0.0
    assert row["advantages/std"] > 0.5  # the masked tokens had advantages to follow
    # bypass over two updates (lr 1e-12: the policy stays put): the engine's logprobs are π_old,
    # and its error is the ratio's: ½·1² per token
    two_updates = ["train_type.ppo_epochs=2", "train_type.minibatches=1"]
    row = _first_step(tmp_path / "bypass", [*two_updates, "train_type.optimizer.lr=1e-12"])
    assert row["policy/approx_kl"] == pytest.approx(0.5, abs=1e-4)
    assert "rollout/logprob_diff_mean" not in row
    # bypass at one update on an engine that samples the live policy: the update's own
    # forward is π_old (training.plan.StepPlan.old_from_update), as in TRL and verl
    row = _first_step(tmp_path / "bypass_one", one_pass)
    assert row["policy/approx_kl"] == 0.0 and row["policy/clipfrac"] == 0.0
    assert "rollout/logprob_diff_mean" not in row


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["engine.old_logprobs=trust"], "engine.old_logprobs='trust' is not one of recompute"),
        (["engine.correction=tis"], "engine.correction='tis' is not one of none, token_trunc"),
        (["engine.correction=token_mask"], "needs engine.old_logprobs=recompute"),
        (
            ["engine.correction_high=3"],
            "engine.correction_high=3.0 is set but engine.correction=none",
        ),
        ([*RECOMPUTE, "engine.correction_high=0.5"], "engine.correction_high must be"),
        ([*RECOMPUTE, "engine.correction_low=1"], "engine.correction_low must be"),
    ],
)
def test_bad_correction_options_are_one_line(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        compose_config(["debug=quick", *overrides])
