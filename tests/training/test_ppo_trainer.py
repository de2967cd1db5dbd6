"""PPO inside the trainer: pinned targets, critic optimizer order/clipping, metric names."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig
from tests.helpers import compose_config

import astrai.algorithms.ppo as ppo_module
from astrai.algorithms.ppo import PPOStrategy
from astrai.metrics.names import reward_term_names
from astrai.training.loop import take_step
from astrai.training.run import Run

PPO_QUICK = [
    "train_type=online_ppo",
    "debug=quick",  # conf/debug/quick.yaml; the lines below differ from it
    "train_type.group_size=4",
    "train_type.ppo_epochs=2",
    "train_type.minibatches=2",
    "train_type.value_clip=0.2",
    # the default kl_coef is 0; a KL penalty keeps the KL-folding path on and gives the returns
    # of a 2-step run (all task rewards 0) some variance, so explained variance is defined
    "train_type.kl_coef=0.01",
]


def _cfg(overrides: list[str]) -> DictConfig:
    return compose_config(overrides)


def test_targets_are_computed_once_and_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real_gae = ppo_module.compute_gae

    def counting_gae(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return real_gae(*args, **kwargs)

    monkeypatch.setattr(ppo_module, "compute_gae", counting_gae)
    trainer = Run(_cfg(PPO_QUICK), tmp_path)
    rollout = trainer.trainer.rollout()
    trainer.trainer.prepare(rollout)
    pinned = {name: getattr(rollout, name) for name in ("values", "advantages", "returns")}
    copies = {name: t.clone() for name, t in pinned.items()}
    metrics = trainer.trainer.update(
        rollout
    )  # 2 epochs × 2 minibatches = 4 replayed gradient steps
    assert len(calls) == 1
    assert metrics["policy/version"] == 4
    for name, tensor in pinned.items():
        assert getattr(rollout, name) is tensor
        assert torch.equal(tensor, copies[name])


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step")
def test_critic_steps_after_the_policy_and_outside_the_version_count(tmp_path: Path) -> None:
    trainer = Run(_cfg(PPO_QUICK), tmp_path)
    events: list[str] = []
    policy_step, critic_step = trainer.parts.optimizer.step, trainer.parts.critic_optimizer.step

    def record_policy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        events.append("policy")
        return policy_step(*args, **kwargs)

    def record_critic(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        events.append("critic")
        return critic_step(*args, **kwargs)

    trainer.parts.optimizer.step = record_policy
    trainer.parts.critic_optimizer.step = record_critic
    rollout = trainer.trainer.rollout()
    trainer.trainer.prepare(rollout)
    metrics = trainer.trainer.update(rollout)
    assert events == ["policy", "critic"] * 4  # each minibatch: the policy, then the critic
    assert metrics["policy/version"] == 4  # policy steps only: a critic step is no version
    assert trainer.started.state.policy_version == 0  # an update alone: nothing counted
    take_step(trainer)  # a whole step: the loop writes the version it reached
    assert trainer.started.state.policy_version == 4 and trainer.started.state.step == 1
    # gradients are cleared after every step: nothing stale leaks into the next minibatch
    assert all(p.grad is None for p in trainer.parts.critic.parameters())
    assert all(p.grad is None for p in trainer.parts.policy.parameters())


def test_critic_gradients_are_clipped_with_max_grad_norm(tmp_path: Path) -> None:
    overrides = [
        *PPO_QUICK,
        "trainer.max_grad_norm=1e-6",
        "critic.optimizer._target_=torch.optim.SGD",
        "critic.optimizer.lr=1.0",
        "~critic.optimizer.betas",
        "~critic.optimizer.weight_decay",
    ]
    trainer = Run(_cfg(overrides), tmp_path)
    with torch.no_grad():  # V ≡ 1 while returns ≈ 0: a large value-loss gradient
        trainer.parts.critic.value_head.bias.fill_(1.0)
    before = torch.cat([p.detach().flatten().clone() for p in trainer.parts.critic.parameters()])
    rollout = trainer.trainer.rollout()
    trainer.trainer.prepare(rollout)
    metrics = trainer.trainer.update(rollout)
    after = torch.cat([p.detach().flatten() for p in trainer.parts.critic.parameters()])
    # SGD(lr=1) moves by exactly the clipped gradient: at most 1e-6 per step, 4 steps
    assert (after - before).norm().item() <= 4e-6 * 1.001
    assert metrics["value/grad_norm"] > 1e-2  # the unclipped norm was much larger


def test_ppo_run_emits_the_documented_metrics(tmp_path: Path) -> None:
    summary = Run(_cfg(PPO_QUICK), tmp_path).fit()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    emitted = set().union(*(r.keys() for r in records)) - {"step"}
    assert reward_term_names(emitted) == {"reward/partial_credit"}  # the default reward's one term
    assert emitted - reward_term_names(emitted) == PPOStrategy.metric_names
    assert summary["train_type"] == "online_ppo"
    assert math.isfinite(summary["value/explained_variance"])
