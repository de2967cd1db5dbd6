"""The KL to the reference at step 1 is exactly 0 in bf16 (issue 59, item 4), on SmolLM2-135M's
real weights: before any update the policy *is* the reference, yet ``kl/k1`` read 2.4e-3 and
``loss/kl`` 1.1e-3 while the reference pass ran through the shared-prompt cache, π_old through
its own scoring split and the update through its micro-batches. Now the reference, π_old and
the update's first epoch run the same forwards over the same rows
(``rollout.minibatch.EpochSplit``, drawn by ``Trainer.run_step`` before scoring).

Two minibatches a step, π_old recomputed (``auto`` in bf16 at several updates), one epoch, and a
learning rate of 1e-30 (AdamW steps that round away: the policy stays the reference, so every
step is step 1): each step's ``kl/k1``, ``kl/k2``, ``kl/k3``, ``loss/kl``,
``policy/approx_kl`` and ``policy/clipfrac`` read exactly 0, its minibatches run whole, one
sequence a micro-batch, or cut by a token budget (rows sorted by length, each part trimmed).
Then one update a step with LoRA adapters (the reference: the policy with its adapters off;
π_old: the update's own forward, where the KL is then measured): the same zeros. Two prompts ×
two responses of up to 8 tokens.

Slow (bf16 on a CPU without bf16 units: 37-80 s on 2 cores): SmolLM2 built twice, four
steps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import compose_config

import astrai.training.trainer as trainer_module
from astrai.training.run import Run

JOB = [
    "task=addition",
    "infra.device=cpu",
    "infra.precision=bf16",
    "trainer.eval_every=100",
    "trainer.eval_prompts=1",
    "train_type.prompts_per_step=2",
    "train_type.group_size=2",
    "train_type.sampling.max_new_tokens=8",
    "train_type.kl_coef=0.05",
    "train_type.ppo_epochs=1",
    "train_type.minibatches=2",
    "train_type.optimizer.lr=1e-30",
    "ckpt.every_steps=0",
    "logger.tensorboard=false",
]
# how the update splits each minibatch of two rows (prompts of 34 tokens, responses of up to 8):
# whole, one sequence a micro-batch, by a token budget that holds one row
SPLITS: list[tuple[int | None, Any]] = [(None, "auto"), (1, "auto"), (None, 40)]


KL_AND_RATIO = ("kl/k1", "kl/k2", "kl/k3", "loss/kl", "policy/approx_kl", "policy/clipfrac")


@pytest.fixture
def micro_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many micro-batches each minibatch of the update ran in, in order."""
    counts: list[int] = []
    accumulate = trainer_module.accumulate_gradients

    def counting(minibatch: Any, parts: Any, *args: Any, **kwargs: Any) -> Any:
        counts.append(len(parts))
        return accumulate(minibatch, parts, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "accumulate_gradients", counting)
    return counts


def _steps(
    model_dir: Path,
    run_dir: Path,
    overrides: list[str],
    splits: list[tuple[int | None, Any]],
    micro_batches: list[int],
) -> dict[tuple[int | None, Any], dict[str, float]]:
    """One step per split ``(micro_batch_size, update_tokens)`` of a run of ``overrides``: its
    ``KL_AND_RATIO`` metrics, and how many micro-batches its first minibatch ran in."""
    cfg = compose_config(["model=hf", f"model.path={model_dir}", *JOB, *overrides])
    trainer = Run(cfg, run_dir)
    # auto in bf16: π_old recomputed at several updates a step, the update's own at one
    assert trainer.started.plan.old_from_update == (trainer.started.plan.correction is None)
    seen: dict[tuple[int | None, Any], dict[str, float]] = {}
    for micro_batch_size, update_tokens in splits:
        # the step's passes cut another way (``StepPlan.passes``), the run's state the same
        plan = trainer.started.plan
        passes = replace(
            plan.passes, micro_batch_size=micro_batch_size, update_tokens=update_tokens
        )
        trainer.trainer.started = replace(trainer.started, plan=replace(plan, passes=passes))
        micro_batches.clear()
        metrics = trainer.train_step()
        seen[micro_batch_size, update_tokens] = {
            **{name: metrics[name] for name in KL_AND_RATIO},
            "micro_batches": micro_batches[0],
        }
    return seen


@pytest.mark.slow
def test_the_kl_to_the_reference_at_step_1_is_exactly_0_in_bf16(
    smollm2: Path, tmp_path: Path, micro_batches: list[int]
) -> None:
    full = _steps(smollm2, tmp_path / "full", [], SPLITS, micro_batches)
    # one update a step (π_old the update's own forward, the KL measured there), LoRA adapters
    # (the reference: the policy with them off), the four rows cut by a budget that holds two
    lora = ["model.lora.rank=8", "model.lora.alpha=16", "train_type.minibatches=1"]
    adapters = _steps(smollm2, tmp_path / "lora", lora, [(None, 100)], micro_batches)
    zeros = dict.fromkeys(KL_AND_RATIO, 0.0)
    for seen in (full, adapters):
        for split, metrics in seen.items():
            parts = metrics.pop("micro_batches")
            assert metrics == zeros, (split, metrics)  # every KL 0, every ratio 1
            assert (parts > 1) == (split != (None, "auto")), (split, parts)
