"""Multi-turn episodes through ``engine=vllm`` (``make test-vllm``): the user environment of
``examples/tool_env`` trains 2 steps with the engine continuing each episode from its token
ids, the engine's logprobs agree with the trainer's on the sampled tokens, and its greedy
held-out episodes are the torch sampler's on the trained policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.episode_envs import EXAMPLE, LOOKUP_ENV
from tests.helpers import compose_config

from astrai.rollout.engines.seeded_vllm import SeededVLLM
from astrai.training.evaluation import evaluate
from astrai.training.run import Run

pytestmark = pytest.mark.vllm

VLLM_BOUND = 5e-5  # |log π_old − log π_behav|, fp32 on this CPU (tests/engine/test_vllm_training)
RUN = [
    "debug=quick",
    "engine=vllm",
    "model.num_attention_heads=2",  # vLLM's CPU attention has no kernel for the preset's 16
    "model.num_key_value_heads=1",
    *LOOKUP_ENV,
    "train_type.sampling.max_new_tokens=8",
    "train_type.group_size=4",
    "trainer.total_steps=2",
    "trainer.eval_every=2",
    "logger.tensorboard=false",
    "ckpt.every_steps=0",
]


def test_a_user_environment_trains_through_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    trainer = Run(compose_config(RUN), tmp_path)
    assert isinstance(trainer.started.engine, SeededVLLM)
    try:
        trainer.fit()
        rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
        steps = [row for row in rows if "env/turns" in row]
        assert [row["step"] for row in steps] == [1, 2]
        for row in steps:
            assert row["rollout/logprob_diff_max"] < VLLM_BOUND, row
            assert row["env/failed"] == 0 and row["rollout/observation_token_frac"] >= 0
        args = (
            trainer.parts.policy,
            trainer.parts.tokenizer,
            trainer.parts.reward,
            trainer.parts.eval_problems,
            8,
        )
        ours = evaluate(*args, engine=trainer.started.engine, collector=trainer.parts.collector)
        reference = evaluate(*args, collector=trainer.parts.collector)
        assert ours.samples == reference.samples and ours.accuracy == reference.accuracy
    finally:
        trainer.started.engine.close()
