"""``engine=vllm`` learns (``make test-vllm``): the default GRPO job on the addition task, with
2 attention heads of 32 (vLLM's CPU kernel has no head size 16), sampled by vLLM's CPU build
for its first 100 steps, raises its reward as the same job sampled by astrai's sampler does.
The full 1,200-step run to eval/accuracy >= 0.9 is too long for a test (issue 34: a bench
script's job)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers import compose_config

from astrai.training.trainer import Trainer

pytestmark = pytest.mark.vllm

STEPS = 100
JOB = [
    "model.num_attention_heads=2",
    "model.num_key_value_heads=1",
    f"trainer.total_steps={STEPS}",
    f"trainer.eval_every={STEPS}",
    "trainer.progress_bar=false",
    "logger.tensorboard=false",
    "ckpt.every_steps=0",
]


def _rewards(run_dir: Path, engine: str) -> list[float]:
    trainer = Trainer(compose_config([f"engine={engine}", *JOB]), run_dir)
    try:
        trainer.fit()
    finally:
        trainer.engine.close()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    return [row["rollout/reward_mean"] for row in rows if "rollout/reward_mean" in row]


def test_the_default_job_sampled_by_vllm_raises_its_reward_as_the_torch_sampler_does(
    tmp_path: Path,
) -> None:
    curves = {engine: _rewards(tmp_path / engine, engine) for engine in ("vllm", "torch")}
    gains = {}
    for engine, rewards in curves.items():
        assert len(rewards) == STEPS
        first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
        gains[engine] = last - first
    # the torch sampler's own gain over these steps is the yardstick (same job, same seeds for
    # prompts; the draws differ): vLLM's must be real and of the same order
    assert gains["torch"] > 0.1, curves["torch"]
    assert gains["vllm"] > 0.5 * gains["torch"], (gains, curves["vllm"])
