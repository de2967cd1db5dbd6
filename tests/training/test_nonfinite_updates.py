"""The last line against non-finite updates (issue 58): an optimizer step with a NaN loss is
skipped and counted and leaves weights, optimizer and schedule as they were; steps skipped in a
row stop the run with one line, exit 2, no checkpoint of them; a checkpoint of non-finite
weights is refused."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.helpers import compose_config
from tests.train_runs import QUICK, run_train_in_process
from torch import nn

from astrai.algorithms.grpo import GRPOStrategy
from astrai.training.nonfinite import NonFiniteGuard, NonFiniteUpdate, Trained
from astrai.training.run import Run

# two optimizer steps per RL step (two minibatches of the 4 × 2 responses)
TWO_UPDATES = [*QUICK, "train_type.minibatches=2", "train_type.ppo_epochs=1"]
ONE_STEP = [*TWO_UPDATES, "trainer.total_steps=1"]


def _nan_after_first_step(trainer: Run, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The strategy's loss is NaN once the policy has taken its first optimizer step (every
    micro-batch of the second minibatch); returns what the models held when it first was."""
    original, seen = trainer.parts.strategy.loss, {}

    def loss(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        value, metrics = original(*args, **kwargs)
        if trainer.started.scheduler.last_epoch == 1:  # one policy step taken
            models = {"policy": trainer.parts.policy, "critic": trainer.parts.critic}
            seen.setdefault("weights", _weights(models))
            optimizers = {
                "policy": trainer.parts.optimizer,
                "critic": trainer.parts.critic_optimizer,
            }
            seen.setdefault("moments", _moments(optimizers))
            value = value * float("nan")
            metrics["loss/total"] = value.detach()
        return value, metrics

    monkeypatch.setattr(trainer.parts.strategy, "loss", loss)
    return seen


def _weights(models: dict[str, nn.Module | None]) -> dict[str, torch.Tensor]:
    return {
        f"{role}.{name}": p.detach().clone()
        for role, model in models.items()
        if model is not None
        for name, p in model.named_parameters()
    }


def _moments(optimizers: dict[str, torch.optim.Optimizer | None]) -> dict[str, torch.Tensor]:
    return {
        f"{role}.{i}.{key}": value.clone()
        for role, optimizer in optimizers.items()
        if optimizer is not None
        for i, state in enumerate(optimizer.state.values())
        for key, value in state.items()
    }


@pytest.mark.parametrize("train_type", ["online_grpo", "online_ppo"])
def test_a_nan_loss_step_is_skipped_counted_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train_type: str
) -> None:
    trainer = Run(compose_config([*ONE_STEP, f"train_type={train_type}"]), tmp_path)
    try:
        before = _nan_after_first_step(trainer, monkeypatch)
        metrics = trainer.train_step()
        models = {"policy": trainer.parts.policy, "critic": trainer.parts.critic}
        after = _weights(models)
        assert (trainer.parts.critic is not None) == (train_type == "online_ppo")
        assert after.keys() == before["weights"].keys()
        for name, weight in after.items():  # exactly the first step's weights, finite
            assert torch.equal(weight, before["weights"][name]), name
            assert torch.isfinite(weight).all(), name
        optimizers = {"policy": trainer.parts.optimizer, "critic": trainer.parts.critic_optimizer}
        moments = _moments(optimizers)
        assert moments.keys() == before["moments"].keys() and moments
        for name, value in moments.items():  # Adam's moments and step count as they were
            assert torch.equal(value, before["moments"][name]), name
        assert metrics["update/nonfinite_skipped"] == 1.0
        assert math.isfinite(metrics["loss/total"])  # the means are over the step taken
        # the first step only: one policy version, one schedule step (policy and critic)
        assert metrics["policy/version"] == 1.0 and trainer.started.state.policy_version == 1
        assert trainer.started.scheduler.last_epoch == 1
        if trainer.started.critic_scheduler is not None:
            assert trainer.started.critic_scheduler.last_epoch == 1
        assert trainer.trainer.nonfinite.in_a_row == 1
    finally:
        trainer.close()


def test_a_step_taken_ends_the_run_of_skips_and_the_limit_stops() -> None:
    # y = w · x with loss (w · x)²: x = [1, 2] at w = [1, 1] gives the gradient 2 · 3 · x
    model = nn.Linear(2, 1, bias=False)
    nn.init.ones_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    trained = [Trained(model, optimizer, scheduler, "policy/grad_norm")]
    guard = NonFiniteGuard(max_norm=1e9, limit=3)

    def step(scale: float) -> bool:
        loss = (model(torch.tensor([1.0, 2.0])) * scale).pow(2).sum()
        loss.backward()
        return guard.step(trained, {"loss/total": loss.detach()}, where=7)

    assert [step(float("nan")), step(float("inf")), step(1.0)] == [False, False, True]
    assert guard.in_a_row == 0 and scheduler.last_epoch == 1
    # w - 0.01 · 6 · [1, 2]: the one step taken, the skipped ones left no gradient behind
    torch.testing.assert_close(model.weight, torch.tensor([[0.94, 0.88]]))
    assert [step(float("nan")), step(float("nan"))] == [False, False]
    with pytest.raises(NonFiniteUpdate, match=r"^3 optimizer steps in a row .* \(step 7; "):
        step(float("nan"))
    assert model.weight.grad is None  # cleared before the stop
    torch.testing.assert_close(model.weight, torch.tensor([[0.94, 0.88]]))


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_skipped_steps_in_a_row_stop_the_run_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every loss NaN: step 1 skips its 2 optimizer steps (its checkpoint holds the initial,
    # finite weights), step 2's first skip is the 3rd in a row: stop, no step_2 checkpoint
    original = GRPOStrategy.loss

    def nan_loss(self: GRPOStrategy, *args: Any, **kwargs: Any) -> Any:
        value, metrics = original(self, *args, **kwargs)
        metrics["loss/total"] = (value * float("nan")).detach()
        return value * float("nan"), metrics

    monkeypatch.setattr(GRPOStrategy, "loss", nan_loss)
    run_dir = tmp_path / "run"
    args = [*TWO_UPDATES, "trainer.total_steps=3", "ckpt.every_steps=1", f"hydra.run.dir={run_dir}"]
    result = run_train_in_process(args, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("astrai:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors[0].startswith(
        "astrai: non-finite update: 3 optimizer steps in a row had a non-finite loss or "
        "gradient norm (step 2; the last: loss/total nan, policy/grad_norm nan)"
    )
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) == ["step_1"]


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_a_learning_rate_that_overflows_stops_the_run_before_it_samples_nan(
    tmp_path: Path,
) -> None:
    # lr 1e30: the first optimizer step leaves huge (finite) weights, whose next forwards
    # overflow: NaN gradients. Without the guard they became NaN weights, and step 2's sampling
    # died ("sampling met NaN probabilities"); with it the 3 steps after the first are skipped
    # and the run stops within step 1, no checkpoint written.
    run_dir = tmp_path / "run"
    args = [
        *TWO_UPDATES,
        "train_type.ppo_epochs=2",  # 4 optimizer steps in step 1
        "train_type.optimizer.lr=1e30",
        "trainer.total_steps=3",
        "ckpt.every_steps=1",
        f"hydra.run.dir={run_dir}",
    ]
    result = run_train_in_process(args, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("astrai:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors[0].startswith("astrai: non-finite update: 3 optimizer steps in a row ")
    assert "(step 1; " in errors[0]
    assert not list(run_dir.glob("checkpoints/step_*"))


def test_a_checkpoint_of_nonfinite_weights_is_refused(tmp_path: Path) -> None:
    trainer = Run(compose_config([*ONE_STEP, "train_type=online_ppo"]), tmp_path)
    checkpoints = tmp_path / "checkpoints"
    try:
        assert trainer.parts.critic is not None
        norm = trainer.parts.policy.model.norm.weight
        kept = norm.detach().clone()
        with torch.no_grad():
            trainer.parts.critic.value_head.weight[0, 3] = float("inf")
        with pytest.raises(
            NonFiniteUpdate, match="refused to write checkpoint step_0: the critic "
        ):
            trainer.save_checkpoint()
        with torch.no_grad():
            trainer.parts.critic.value_head.weight.zero_()
            norm[1] = float("nan")
        with pytest.raises(
            NonFiniteUpdate, match="the policy weight 'model.norm.weight' holds NaN"
        ):
            trainer.save_checkpoint()
        assert not list(checkpoints.glob("step_*"))  # nothing written
        with torch.no_grad():
            norm.copy_(kept)
        assert trainer.save_checkpoint() == checkpoints / "step_0"  # finite again: written
        assert (checkpoints / "step_0" / "model.safetensors").is_file()
    finally:
        trainer.close()
