"""Memory knobs that must not change the algorithm: micro-batching (gradient accumulation),
bf16 autocast and gradient checkpointing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config

from astrai.models.llama import LlamaConfig, LlamaForCausalLM, set_gradient_checkpointing
from astrai.training.run import Run

BASE = [
    "debug=quick",
    "infra.device=cpu",
    "train_type.group_size=4",
    "train_type.minibatches=2",
    "train_type.ppo_epochs=2",
    "train_type.kl_coef=0.1",  # every loss term at work
    # rewards vary within every group by construction: the update is the policy gradient's,
    # not weight decay's alone (a random model's answers may all score 0)
    *ALTERNATING,
]


# PPO's 16 sequences are 16 prompts x 1: no prompt repeats, so its scoring passes (reference,
# critic targets) run whole sequences in parts of any size. Prompts shared within a part
# (astrai.models.shared_prefix) would make them differ from the whole batch's by an ulp, which
# Adam's first steps on the critic's zero-initialised head magnify past this test's bound;
# tests/models/test_shared_prefix.py holds that path to the whole batch's outputs.
SHAPE = {
    "online_grpo": [],  # 4 prompts x 4 (BASE)
    "online_ppo": ["train_type.group_size=1", "train_type.prompts_per_step=16"],
}
# Adam's first steps move every weight by about ±lr whatever its gradient's size, so a gradient
# near zero whose sign an ulp flips moves a weight 2·lr the other way: the order of a sum (one
# pass vs parts) then shows past any tight bound, by the machine's luck (its BLAS kernels). An eps
# above the small gradients makes the update proportional to them, so ulps stay ulps.
STEADY_ADAM = {
    "online_grpo": ["+train_type.optimizer.eps=1e-2"],
    "online_ppo": ["+train_type.optimizer.eps=1e-2", "+critic.optimizer.eps=1e-2"],
}


# micro-batches of 3 sequences, or by a token budget of 30 (rows of at most 5 + 4 tokens: 3 a
# part, sorted by length and trimmed, models.length_parts), or scoring passes (reference,
# critic) of 40 tokens (GRPO: one group of 4 a part, by prompt length, its responses by length:
# models.length_parts.group_parts)
SPLITS = {
    "micro": "train_type.micro_batch_size=3",
    "tokens": "train_type.update_tokens=30",
    "scoring": "train_type.score_tokens=40",
}


@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize("train_type", ["online_grpo", "online_ppo"])
def test_micro_batches_make_the_same_update(tmp_path: Path, train_type: str, split: str) -> None:
    # 16 sequences, 2 minibatches of 8, micro-batches of 3 (3 + 3 + 2: the token weighting must
    # hold for uneven parts); two RL steps = 8 optimizer steps
    states = {}
    for micro in ("null", "3"):
        overrides = [
            f"train_type={train_type}",
            *BASE,
            *SHAPE[train_type],
            *STEADY_ADAM[train_type],
            "train_type.micro_batch_size=null" if micro == "null" else SPLITS[split],
        ]
        trainer = Run(compose_config(overrides), tmp_path / micro)
        for _ in range(2):
            metrics = trainer.train_step()
        critic = trainer.parts.critic.state_dict() if trainer.parts.critic is not None else {}
        states[micro] = (trainer.parts.policy.state_dict(), critic, metrics)
    whole, micro = states["null"], states["3"]
    initial_config = compose_config([f"train_type={train_type}", *BASE, *SHAPE[train_type]])
    initial = Run(initial_config, tmp_path / "i")
    moved = max((whole[0][n] - initial.parts.policy.state_dict()[n]).abs().max() for n in whole[0])
    assert moved > 1e-4  # the update is not trivially zero
    for name, value in whole[0].items():
        torch.testing.assert_close(micro[0][name], value, atol=1e-5, rtol=0)
    for name, value in whole[1].items():
        torch.testing.assert_close(micro[1][name], value, atol=1e-5, rtol=0)
    for name in ("loss/policy", "loss/total", "policy/entropy", "policy/clipfrac"):
        assert micro[2][name] == pytest.approx(whole[2][name], abs=1e-5), name


@pytest.mark.parametrize("train_type", ["online_grpo", "online_ppo"])
def test_bf16_trains_three_steps_with_finite_losses(tmp_path: Path, train_type: str) -> None:
    overrides = [f"train_type={train_type}", *BASE, "infra.precision=bf16"]
    trainer = Run(compose_config([*overrides, "trainer.total_steps=3"]), tmp_path)
    with trainer.trainer.autocast():  # forward passes run in bfloat16 ...
        ids = torch.tensor([[5, 6, 7]])
        assert trainer.parts.policy(ids, attention_mask=ids > 0).logits.dtype == torch.bfloat16
    summary = trainer.fit()
    assert summary["step"] == 3
    losses = [summary[name] for name in summary if str(name).startswith("loss/")]
    assert losses and all(math.isfinite(float(v)) for v in losses)  # type: ignore[arg-type]
    # ... while the weights and the optimizer state stay float32
    assert all(p.dtype == torch.float32 for p in trainer.parts.policy.parameters())
    moments = [s["exp_avg"] for s in trainer.parts.optimizer.state.values()]
    assert moments and all(m.dtype == torch.float32 for m in moments)


def test_gradient_checkpointing_gives_the_same_gradients() -> None:
    torch.manual_seed(0)
    plain = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, initializer_range=0.2)).train()
    recomputing = LlamaForCausalLM(plain.config).train()
    recomputing.load_state_dict(plain.state_dict())
    set_gradient_checkpointing(recomputing, True)
    ids = torch.randint(3, 48, (4, 9))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[0, :3] = False  # a left-padded row
    for model in (plain, recomputing):
        logits = model(ids, attention_mask=mask).logits
        logits.log_softmax(-1)[..., 5].sum().backward()
    for (name, a), b in zip(plain.named_parameters(), recomputing.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=0, msg=name)
    # it really recomputes: the checkpointed forward keeps fewer tensors for backward
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        recomputing(ids, attention_mask=mask)
        n_recomputing = len(saved)
        saved.clear()
        plain(ids, attention_mask=mask)
    assert n_recomputing < len(saved)


def test_an_offloaded_reference_scores_the_same_and_waits_on_the_cpu(tmp_path: Path) -> None:
    results = []
    for offload in ("false", "true"):
        cfg = compose_config([*BASE, f"infra.offload_reference={offload}"])
        trainer = Run(cfg, tmp_path / offload)
        moved_to: list[str] = []
        _record_moves(trainer.parts.reference, moved_to)
        rollout = trainer.trainer.rollout()
        trainer.trainer.prepare(rollout)
        results.append(rollout.ref_logprobs)
        assert moved_to == ([] if offload == "false" else ["cpu", "cpu"])  # device, then back
        assert all(p.device.type == "cpu" for p in trainer.parts.reference.parameters())
    torch.testing.assert_close(results[1], results[0], atol=0, rtol=0)


def _record_moves(module: torch.nn.Module, moves: list[str]) -> None:
    """Append the device of every ``module.to(device)`` call to ``moves``."""
    to = module.to

    def recording_to(device: str | torch.device) -> torch.nn.Module:
        moves.append(str(device))
        return to(device)

    module.to = recording_to  # type: ignore[method-assign, assignment]
