"""LoRA with ``engine=vllm`` (issue 49, ``make test-vllm``): the engine takes the merged weights
after every update (``models.merged_weights.engine_weights``, TRL's merge-push-unmerge without
touching the policy). 20 steps of the tiny job with adapters stay within the vLLM tests' mismatch
bound on every step, and after the updates the engine's greedy continuations are the torch
sampler's on the adapted policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config

from astrai.models.lora import has_adapters
from astrai.rollout.engines.seeded_vllm import SeededVLLM
from astrai.training.evaluation import evaluate
from astrai.training.run import Run

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

VLLM_BOUND = 5e-5  # |log π_old − log π_behav|, fp32 on this CPU (test_vllm_training.py)

RUN = [
    "debug=quick",
    "engine=vllm",
    "model.num_attention_heads=2",  # 2 heads of 32: vLLM's CPU kernel has none for 16
    "model.num_key_value_heads=1",
    "model.lora.rank=8",
    "model.lora.alpha=16",
    "train_type.optimizer.lr=5e-3",  # adapters move visibly within 20 steps
    "trainer.total_steps=20",
    "trainer.eval_every=20",
    "logger.tensorboard=false",
    "ckpt.every_steps=0",
    *ALTERNATING,
]


def test_lora_with_the_engine_stays_in_bound_and_answers_as_the_torch_sampler(
    tmp_path: Path,
) -> None:
    trainer = Run(compose_config(RUN), tmp_path / "run")
    assert isinstance(trainer.started.engine, SeededVLLM) and has_adapters(trainer.parts.policy)
    try:
        trainer.fit()
        rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
        steps = [row for row in rows if "perf/weight_sync_s" in row]
        assert [row["step"] for row in steps] == list(range(1, 21))
        for row in steps:
            assert row["rollout/logprob_diff_max"] < VLLM_BOUND, row["step"]
        adapters = [p for n, p in trainer.parts.policy.named_parameters() if "lora_B" in n]
        assert max(float(p.abs().max()) for p in adapters) > 1e-3  # the adapters moved
        problems = trainer.parts.eval_problems[:16]
        args = (trainer.parts.policy, trainer.parts.tokenizer, trainer.parts.reward, problems, 8)
        with torch.no_grad():
            ours = evaluate(*args, engine=trainer.started.engine)
            reference = evaluate(*args)
        assert ours.samples == reference.samples and ours.accuracy == reference.accuracy
    finally:
        trainer.started.engine.close()
