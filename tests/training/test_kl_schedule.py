"""At ``kl_coef`` 0 the reference is scored only on the steps that log ``kl/*`` (step 1 and
every ``logger.kl_every``), and skipping it leaves the weights bitwise unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config, weights_digest

from astrai.metrics.names import KL_METRICS, kl_logged_at
from astrai.training.run import Run

SMALL = [
    "debug=quick",
    "trainer.total_steps=4",
    "trainer.eval_every=4",
    "train_type.prompts_per_step=4",
    "train_type.group_size=4",
    "train_type.minibatches=2",
    "logger.tensorboard=false",
]


def test_kl_logged_at_every_step_with_a_penalty_else_on_schedule() -> None:
    assert all(kl_logged_at(step, 0.05, 10) for step in range(1, 30))
    assert [s for s in range(1, 31) if kl_logged_at(s, 0.0, 10)] == [1, 10, 20, 30]
    assert [s for s in range(1, 5) if kl_logged_at(s, 0.0, 1)] == [1, 2, 3, 4]


def _fit(overrides: list[str], run_dir: Path) -> tuple[Run, list[int], list[dict]]:
    """A finished run, the steps at which its reference ran a forward, its metrics rows."""
    trainer = Run(compose_config([*SMALL, *overrides]), run_dir)
    scored: list[int] = []
    trainer.parts.reference.register_forward_hook(
        lambda *_: scored.append(trainer.started.state.step + 1)
    )
    trainer.fit()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return trainer, sorted(set(scored)), rows


@pytest.mark.parametrize("train_type", ["online_grpo", "online_ppo"])
def test_reference_runs_only_on_the_steps_that_log_kl(tmp_path: Path, train_type: str) -> None:
    overrides = [f"train_type={train_type}", "train_type.kl_coef=0", "logger.kl_every=2"]
    _, scored, rows = _fit(overrides, tmp_path)
    assert scored == [1, 2, 4]
    names = KL_METRICS if train_type == "online_grpo" else KL_METRICS - {"loss/kl"}
    for row in rows[1:]:  # row 0: the step-0 evaluation
        assert (names <= row.keys()) == (row["step"] in scored), row["step"]
        assert not (KL_METRICS - names) & row.keys()


def test_reference_runs_every_step_while_kl_coef_is_nonzero(tmp_path: Path) -> None:
    _, scored, rows = _fit(["train_type.kl_coef=0.05", "logger.kl_every=3"], tmp_path)
    assert scored == [1, 2, 3, 4]
    assert all(KL_METRICS <= row.keys() for row in rows[1:])


@pytest.mark.parametrize(
    "overrides",
    [
        ["train_type=online_ppo"],  # kl_coef 0 is PPO's default: the KL term of the rewards
        ["train_type=online_ppo", "train_type.kl_estimator=k1", "train_type.entropy_coef=0"],
        ["train_type=online_grpo"],  # the KL term of the loss
        ["train_type=online_grpo", "train_type.advantage=reinforce_pp"],  # of the rewards
    ],
    ids=["ppo", "ppo-k1-no-entropy-bonus", "grpo", "reinforce_pp"],
)
def test_skipping_the_reference_leaves_the_weights_bitwise_unchanged(
    tmp_path: Path, overrides: list[str]
) -> None:
    digests = []
    for kl_every in (1, 1000):  # the reference scored every step / at step 1 only
        # rewards that vary within every group by construction: the weights follow a gradient
        # (a random model's answers may all score 0, leaving weight decay alone to move them)
        run = [*overrides, *ALTERNATING, "train_type.kl_coef=0", f"logger.kl_every={kl_every}"]
        trainer, scored, rows = _fit(run, tmp_path / str(kl_every))
        assert scored == ([1, 2, 3, 4] if kl_every == 1 else [1])
        assert all(row["advantages/std"] > 0 for row in rows[1:])
        models = [trainer.parts.policy] + (
            [trainer.parts.critic] if trainer.parts.critic is not None else []
        )
        digests.append(weights_digest(*models))
    assert digests[0] == digests[1]


def test_reference_and_critic_targets_are_ordinary_tensors(tmp_path: Path) -> None:
    # scored under inference mode, they must still be usable by the autograd of the update
    trainer = Run(compose_config([*SMALL, "train_type=online_ppo"]), tmp_path)
    rollout = trainer.trainer.rollout()
    trainer.trainer.prepare(rollout)
    for name in ("ref_logprobs", "values", "advantages", "returns"):
        tensor = getattr(rollout, name)
        assert isinstance(tensor, torch.Tensor) and not tensor.is_inference(), name


def test_an_offloaded_reference_is_not_moved_on_a_step_that_skips_it(tmp_path: Path) -> None:
    overrides = ["train_type=online_ppo", "infra.offload_reference=true", "logger.kl_every=5"]
    trainer = Run(compose_config([*SMALL, *overrides]), tmp_path)
    moves: list[object] = []
    to = trainer.parts.reference.to

    def recording_to(device: object) -> torch.nn.Module:
        moves.append(device)
        return to(device)

    trainer.parts.reference.to = recording_to  # type: ignore[method-assign, assignment]
    for step, expected in ((0, 2), (1, 0), (4, 2)):  # steps 1, 2 and 5 (kl_coef 0 by default)
        trainer.started.state.step = step
        rollout = trainer.trainer.rollout()
        metrics = trainer.trainer.prepare(rollout)
        assert len(moves) == expected and ("kl/k3" in metrics) == (expected > 0)
        assert (rollout.ref_logprobs is not None) == (expected > 0)
        moves.clear()
