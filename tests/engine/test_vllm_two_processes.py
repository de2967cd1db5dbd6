"""``engine=vllm`` in 2 CPU processes (``make test-vllm``): ``train.py infra.nproc_per_node=2``
starts one engine per rank on the trainer's process group (vLLM's ``external_launcher``), each
rank samples its own prompts through its own engine and takes every update's weights, the
mismatch is logged on every step, and the run evaluates, checkpoints and exits 0 as an
``engine=torch`` 2-process run does (vLLM's shutdown leaves the trainer's group alone). A
resume is ``test_vllm_training``'s (one process, bitwise); two more process starts here would
cost ~45 s of the lane."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.train_runs import run_train

pytestmark = pytest.mark.vllm

# vLLM's CPU build against the trainer's recomputation, fp32: the largest |Δ logprob| measured
# in these runs was ~1.5e-5 (docs/engines.md); the bound leaves room for other prompts
VLLM_BOUND = 5e-5


def test_two_processes_each_run_an_engine(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [
        "debug=quick",
        "engine=vllm",
        "model.num_attention_heads=2",
        "model.num_key_value_heads=1",
        "infra.device=cpu",
        "infra.nproc_per_node=2",
        "logger.tensorboard=false",
        "trainer.eval_every=2",
        f"hydra.run.dir={run_dir}",
    ]
    run = run_train([*args, "trainer.total_steps=2"], tmp_path, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["step"] == 2 and summary["stopped"] is None
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    steps = [row for row in rows if row["step"] > 0]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert 0 < row["perf/weight_sync_s"] < 10
        assert row["rollout/logprob_diff_max"] < VLLM_BOUND
        assert row["rollout/is_masked_frac"] == 0.0
    state = json.loads((run_dir / "checkpoints" / "step_2" / "trainer_state.json").read_text())
    assert state["world_size"] == 2
    assert "eval/accuracy" in steps[-1]  # both ranks evaluated through their engines
