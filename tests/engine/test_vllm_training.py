"""``engine=vllm`` inside the trainer (``make test-vllm``): the rollouts and evaluations of a
run sample through the engine, its weights follow every update (the engine's greedy answers
equal the torch sampler's on the trained policy), the sync is logged, and a resumed run equals
the straight one bitwise (the engine's requests are seeded from the run's random streams, and
vLLM's CPU build is deterministic)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config

from astrai.config.validate import ConfigError
from astrai.rollout.engines.seeded_vllm import SeededVLLM
from astrai.training.evaluation import evaluate
from astrai.training.run import Run

pytestmark = pytest.mark.vllm

VLLM_BOUND = 5e-5  # |log π_old − log π_behav|, fp32 on this CPU

# model=tiny with 2 heads of 32 (vLLM's CPU attention has no kernel for the preset's 16)
RUN = [
    "debug=quick",
    "engine=vllm",
    "model.num_attention_heads=2",
    "model.num_key_value_heads=1",
    "trainer.total_steps=3",
    "trainer.eval_every=3",
    "logger.tensorboard=false",
    "ckpt.every_steps=0",
    # rewards that vary within every group by construction: the weights follow the policy
    # gradient (a random model's answers may all score 0, leaving weight decay alone)
    *ALTERNATING,
]


def _trainer(run_dir: Path, *extra: str) -> Run:
    return Run(compose_config([*RUN, *extra]), run_dir)


def test_a_run_samples_through_the_engine_and_its_weights_follow_the_updates(
    tmp_path: Path,
) -> None:
    trainer = _trainer(tmp_path / "run")
    assert isinstance(trainer.started.engine, SeededVLLM)
    try:
        initial = {k: v.clone() for k, v in trainer.parts.policy.state_dict().items()}
        trainer.fit()
        rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
        steps = [row for row in rows if "perf/weight_sync_s" in row]
        assert [row["step"] for row in steps] == [1, 2, 3]
        assert all(0 < row["perf/weight_sync_s"] < 5 for row in steps)
        # the engine's logprobs against the trainer's π_old on every step (fp32): measured up to
        # ~1.5e-5 on this CPU (docs/engines.md); TIS's weights then stay inside its [0, 2]
        for row in steps:
            assert row["rollout/logprob_diff_max"] < VLLM_BOUND, row["step"]
            assert abs(row["rollout/is_ratio_max"] - 1) < VLLM_BOUND
            assert row["rollout/is_masked_frac"] == 0.0
            assert row["advantages/std"] > 0
        moved = max(
            (trainer.parts.policy.state_dict()[k] - v).abs().max() for k, v in initial.items()
        )
        assert moved > 0
        # the engine holds the trained weights: its greedy answers are the torch sampler's
        problems = trainer.parts.eval_problems[:16]
        args = (trainer.parts.policy, trainer.parts.tokenizer, trainer.parts.reward, problems, 8)
        ours = evaluate(*args, engine=trainer.started.engine)
        reference = evaluate(*args)
        assert ours.samples == reference.samples and ours.accuracy == reference.accuracy
    finally:
        trainer.started.engine.close()


# the engine samples step t+1 on a thread while step t updates, then takes the new weights
LAG = ["train_type.max_policy_lag=1"]  # engine=vllm's defaults: recompute + token_truncate


@pytest.mark.parametrize("extra", [[], LAG], ids=["sync", "lag"])
def test_a_resumed_run_equals_the_straight_one(tmp_path: Path, extra: list[str]) -> None:
    """With ``max_policy_lag=1`` the checkpoint at step 1 holds step 2's rollout, which the
    engine sampled on the initial weights while update 1 ran. In one process: a resume in a
    fresh one (its first sample beside its first update) is ``test_vllm_killed_resume``'s."""
    straight = _trainer(tmp_path / "straight", *extra)
    straight.fit()
    straight.close()
    first = _trainer(tmp_path / "split", *extra)
    first.fit(until=1)
    first.close()
    resumed = _trainer(tmp_path / "split", *extra)  # ckpt.resume=auto: step_1
    assert resumed.started.state.step == 1
    resumed.fit()
    resumed.close()
    for name, value in straight.parts.policy.state_dict().items():
        assert torch.equal(value, resumed.parts.policy.state_dict()[name]), name
    rows = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").open()]
    lags = [row["rollout/policy_lag"] for row in rows if "rollout/policy_lag" in row]
    assert lags == ([0.0, 1.0, 1.0] if extra else [0.0, 0.0, 0.0])


def test_the_preset_head_size_is_refused_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match="engine=vllm: vLLM's CPU attention has no kernel"):
        compose_config(["debug=quick", "engine=vllm"])  # model=tiny: 4 heads of 16
