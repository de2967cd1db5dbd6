"""``trainer.stop_at``: a run stops at the first step whose metrics reach every target, writes
its checkpoint and says why in ``summary.json``; resumed, it continues exactly as the run
that never stopped. Targets are parsed and checked against what the run logs before it
starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config

from astrai.config.errors import ConfigError
from astrai.config.validate import validate_config
from astrai.metrics.targets import MetricTarget, parse_targets, targets_reached
from astrai.training.run import Run

# 4 steps, evaluated at 2 and 4; the alternating reward gives every group advantages of +-1,
# so the policy moves at every step whatever the random model samples
RUN = [
    "debug=quick",
    "trainer.total_steps=4",
    "trainer.eval_every=2",
    "ckpt.every_steps=0",
    *ALTERNATING,
]


def test_a_number_is_a_floor_and_a_string_says_which_way() -> None:
    targets = parse_targets({"eval/accuracy": 0.9, "loss/policy": "<=0.1", "kl/k3": " >= 2"})
    assert targets == [
        MetricTarget("eval/accuracy", 0.9),
        MetricTarget("loss/policy", 0.1, at_most=True),
        MetricTarget("kl/k3", 2.0),
    ]
    assert [str(t) for t in targets] == ["eval/accuracy >= 0.9", "loss/policy <= 0.1", "kl/k3 >= 2"]
    assert parse_targets(None) == [] and parse_targets({}) == []


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"eval/accuracy": "high"}, "trainer.stop_at.eval/accuracy must be a number"),
        ({"eval/accuracy": True}, "trainer.stop_at.eval/accuracy must be a number"),
        ({"eval/accuracy": None}, "trainer.stop_at.eval/accuracy must be a number"),
        ({"eval/accuracy": "<0.5"}, "trainer.stop_at.eval/accuracy must be a number"),
        ({"eval/accuracy": float("nan")}, "trainer.stop_at.eval/accuracy must be finite"),
        ([0.9], "trainer.stop_at must be a mapping"),
    ],
)
def test_a_bad_bound_names_its_key(node: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_targets(node)  # type: ignore[arg-type]


def test_every_target_must_hold_and_one_of_them_was_just_logged() -> None:
    targets = [MetricTarget("eval/accuracy", 0.9), MetricTarget("loss/policy", 0.1, at_most=True)]
    latest = {"eval/accuracy": 0.95, "loss/policy": 0.05, "rollout/reward_mean": 0.5}
    assert targets_reached(targets, {"loss/policy": 0.05}, latest) == {
        "eval/accuracy": 0.95,
        "loss/policy": 0.05,
    }
    # the bounds themselves count as reached
    at_bounds = {"eval/accuracy": 0.9, "loss/policy": 0.1}
    assert targets_reached(targets, at_bounds, at_bounds) == at_bounds
    # one target short, or a step that logged none of the targets' metrics: not yet
    assert targets_reached(targets, {"loss/policy": 0.2}, {**latest, "loss/policy": 0.2}) is None
    assert targets_reached(targets, {"rollout/reward_mean": 0.5}, latest) is None
    # a metric never logged (a resumed rank without the history) or not finite: not reached
    assert targets_reached(targets, {"loss/policy": 0.05}, {"loss/policy": 0.05}) is None
    nan = {**latest, "eval/accuracy": float("nan")}
    assert targets_reached(targets, {"eval/accuracy": float("nan")}, nan) is None
    assert targets_reached([], latest, latest) is None


def _trainer(run_dir: Path, *extra: str) -> Run:
    return Run(compose_config([*RUN, *extra]), run_dir)


def test_the_run_stops_at_the_step_that_reached_it_and_resumes_exactly(tmp_path: Path) -> None:
    straight = _trainer(tmp_path / "straight")
    straight.fit()
    # eval/accuracy >= 0 holds at the first evaluation after a step: step 2 (the step-0
    # evaluation is logged before any step, and steps 1 and 3 log no evaluation)
    stopped_dir = tmp_path / "stopped"
    first = _trainer(stopped_dir, "trainer.stop_at={eval/accuracy:0}")
    summary = first.fit()
    assert first.started.state.step == 2 and summary["step"] == 2
    assert summary["stopped"] == "stop_at"
    rows = [json.loads(line) for line in (stopped_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    expected = {"eval/accuracy": rows[2]["eval/accuracy"]}
    assert summary["stop_at"] == expected
    written = json.loads((stopped_dir / "summary.json").read_text())
    assert written["stopped"] == "stop_at" and written["stop_at"] == expected
    assert written["checkpoint"] == str(stopped_dir / "checkpoints" / "step_2")
    # resumed without the target (a user training on past it): the straight run's weights
    second = _trainer(stopped_dir)
    assert second.started.state.resumed_from == stopped_dir / "checkpoints" / "step_2"
    assert second.fit()["stopped"] is None and second.started.state.step == 4
    for (name, ours), theirs in zip(
        second.parts.policy.state_dict().items(),
        straight.parts.policy.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(ours, theirs), name
    pairs = zip(
        straight.parts.policy.parameters(), straight.parts.reference.parameters(), strict=True
    )
    assert any(not torch.equal(p, r) for p, r in pairs)  # the weights moved: not a trivial match


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["trainer.stop_at={eval/acc:0.9}"],
            "trainer.stop_at.eval/acc: this run does not log 'eval/acc'",
        ),
        (  # a critic's metric under GRPO would never stop the run
            ["trainer.stop_at={value/explained_variance:0.5}"],
            "trainer.stop_at.value/explained_variance: this run does not log",
        ),
        (["trainer.stop_at={eval/accuracy:high}"], "trainer.stop_at.eval/accuracy must be a"),
        (["trainer.stop_at=0.9"], "trainer.stop_at must be a mapping"),
    ],
)
def test_a_target_the_run_never_logs_is_refused_at_start(extra: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_config(compose_config(["debug=quick", *extra]))


def test_reward_terms_and_another_algorithms_metrics_are_known_where_logged() -> None:
    validate_config(compose_config(["debug=quick", "trainer.stop_at={reward/partial_credit:0.5}"]))
    validate_config(
        compose_config(
            [
                "debug=quick",
                "train_type=online_ppo",
                "trainer.stop_at={value/explained_variance:0.5}",
            ]
        )
    )
