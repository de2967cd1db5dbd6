"""The critic has its own peak learning rate (``critic.optimizer.lr``) and, by default, the
policy's schedule (``critic.scheduler: ${train_type.scheduler}``), as verl and OpenRLHF: a PPO
run's lowered policy lr no longer leaves the critic on a constant 1e-3 unseen (issue 32, 3).

Hand-computed: warmup_cosine with 0 warmup steps and ``min_lr_ratio`` 0.1 over ``T`` optimizer
steps gives, after ``k`` of them, ``lr·(0.1 + 0.9·½(1 + cos(πk/T)))``. Two RL steps of
``ppo_epochs=2 × minibatches=2`` optimizer steps: T = 8; step 1 logs k = 4 (factor 0.55), the
run ends at k = 8 (factor 0.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers import compose_config

from astrai.training.run import Run

PPO = [
    "train_type=online_ppo",
    "debug=quick",
    "trainer.total_steps=2",
    "trainer.eval_every=2",
    "train_type.ppo_epochs=2",
    "train_type.minibatches=2",
    "train_type.optimizer.lr=1e-3",
    "critic.optimizer.lr=1e-2",
    "train_type.scheduler.min_lr_ratio=0.1",
    "logger.tensorboard=false",
]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_critic_follows_the_policys_schedule_from_its_own_peak(tmp_path: Path) -> None:
    trainer = Run(compose_config(PPO), tmp_path)
    trainer.fit()
    step_1 = _rows(tmp_path)[1]
    assert step_1["policy/lr"] == pytest.approx(1e-3 * 0.55)
    assert step_1["value/lr"] == pytest.approx(1e-2 * 0.55)
    assert trainer.parts.critic_optimizer is not None
    assert trainer.parts.critic_optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 * 0.1)
    assert trainer.parts.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.1)
    assert (tmp_path / "checkpoints" / "step_2" / "value_scheduler.pt").is_file()


def test_critic_scheduler_null_keeps_the_critics_lr_constant(tmp_path: Path) -> None:
    trainer = Run(compose_config([*PPO, "critic.scheduler=null"]), tmp_path)
    trainer.fit()
    assert [row.get("value/lr") for row in _rows(tmp_path)[1:]] == [1e-2, 1e-2]
    assert trainer.parts.critic_optimizer is not None
    assert trainer.parts.critic_optimizer.param_groups[0]["lr"] == 1e-2
