"""The trainer end to end in-process: metric names in every sink, GRPO update math, eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config, weights_digest

from astrai.algorithms.grpo import GRPOStrategy
from astrai.metrics.names import reward_term_names
from astrai.rollout.minibatch import flatten_rollout
from astrai.training.run import Run

METRICS = GRPOStrategy.metric_names

QUICK = [
    "debug=quick",  # conf/debug/quick.yaml; the lines below differ from it
    "trainer.total_steps=3",
    "trainer.eval_every=2",
    "train_type.group_size=4",
    "train_type.minibatches=2",
    "train_type.ppo_epochs=1",
    "train_type.kl_coef=0.1",
    "logger.samples_every=1",
    "logger.flush_secs=1",
]


def _cfg(overrides: list[str]) -> DictConfig:
    return compose_config(overrides)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("run")
    trainer = Run(_cfg(QUICK), run_dir)
    summary = trainer.fit()
    return run_dir, summary


def test_jsonl_has_every_documented_metric_and_nothing_undocumented(finished_run) -> None:  # noqa: ANN001
    run_dir, _ = finished_run
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    emitted = set().union(*(r.keys() for r in records)) - {"step"}
    assert reward_term_names(emitted) == {"reward/partial_credit"}  # the default reward's one term
    assert emitted - reward_term_names(emitted) == set(METRICS)
    # evaluation at step 0, every eval_every steps and at the end
    assert [r["step"] for r in records if "eval/accuracy" in r] == [0, 2, 3]


def test_tensorboard_event_files_hold_the_metrics(finished_run) -> None:  # noqa: ANN001
    run_dir, summary = finished_run
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert tags == set(METRICS) | {"reward/partial_credit"}
    rewards = events.Scalars("rollout/reward_mean")
    assert [e.step for e in rewards] == [1, 2, 3]
    assert rewards[-1].value == pytest.approx(summary["rollout/reward_mean"], abs=1e-6)
    assert [e.step for e in events.Scalars("eval/accuracy")] == [0, 2, 3]
    text_tags = set(events.Tags()["tensors"])
    assert {"samples/rollout/text_summary", "samples/eval/text_summary"} <= text_tags


def test_summary_holds_final_metrics(finished_run) -> None:  # noqa: ANN001
    run_dir, summary = finished_run
    on_disk = json.loads((run_dir / "summary.json").read_text())
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert on_disk["step"] == 3
    assert on_disk["eval/accuracy"] == last["eval/accuracy"]
    assert on_disk["policy/version"] == 6.0  # 3 steps × 1 epoch × 2 minibatches
    assert on_disk["train_type"] == "online_grpo"
    assert set(METRICS) <= set(on_disk)


def test_first_grpo_loss_is_minus_mean_advantage(tmp_path: Path) -> None:
    # Before any update the policy equals the sampler and the reference: ratio = 1 and
    # KL = 0, so loss = -token_mean(A) and the logprobs re-scored by the trainer match.
    # rewards that vary within every group by construction: the advantages are +-1, not the 0
    # of a random model whose answers all scored 0 (then 0 == -mean(0) proves nothing)
    trainer = Run(_cfg([*QUICK, *ALTERNATING]), tmp_path)
    rollout = trainer.trainer.rollout()
    trainer.trainer.prepare(rollout)
    batch = flatten_rollout(rollout)
    loss, metrics = trainer.parts.strategy.loss(trainer.parts.policy, batch)
    mask = batch.response_mask
    assert batch.advantages[mask].abs().min().item() > 0.5
    expected = -(batch.advantages * mask).sum() / mask.sum()
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=0)
    assert metrics["policy/clipfrac"].item() == 0.0
    assert metrics["loss/kl"].abs().item() < 1e-6
    assert rollout.ref_logprobs is not None
    torch.testing.assert_close(rollout.ref_logprobs, rollout.logprobs, atol=1e-5, rtol=0)


def test_update_counts_optimizer_steps_and_pins_targets(tmp_path: Path) -> None:
    trainer = Run(_cfg([*QUICK, "train_type.ppo_epochs=3"]), tmp_path)
    rollout = trainer.trainer.rollout()
    trainer.trainer.prepare(rollout)
    pinned = rollout.advantages
    advantages = pinned.clone()
    # every response token carries the version that sampled it (issue 60), -1 the padding
    assert torch.equal(rollout.token_versions, torch.where(rollout.response_mask, 0, -1))
    metrics = trainer.trainer.update(rollout)
    assert metrics["policy/version"] == 6.0  # 3 epochs × 2 minibatches
    assert trainer.started.state.policy_version == 0  # the loop writes it (loop.take_step)
    assert rollout.advantages is pinned  # pinned, not recomputed
    assert torch.equal(rollout.advantages, advantages)


def test_same_seed_same_run(tmp_path: Path) -> None:
    # every logged value (wall-clock ones aside) and the weights; the rewards vary within every
    # group by construction, so the runs train (all-zero rewards would make 0.0 == 0.0)
    runs = []
    for name in ("a", "b"):
        trainer = Run(_cfg([*QUICK, *ALTERNATING]), tmp_path / name)
        trainer.fit()
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        rows = [
            {k: v for k, v in json.loads(line).items() if not k.startswith(("time/", "perf/"))}
            for line in lines
        ]
        runs.append((rows, weights_digest(trainer.parts.policy)))
    assert runs[0] == runs[1]
    rows = runs[0][0]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(r["advantages/std"] > 0 for r in rows[1:])
