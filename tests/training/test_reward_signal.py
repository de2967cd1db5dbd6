"""A run with no learning signal says so (issue 45): ``rollout/frac_reward_zero_std`` and
``rollout/truncated_frac`` every step, and one warning after 3 steps in a row whose rewards
carry nothing, naming the cause and the key to change."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from tests.constructed_rewards import ALTERNATING, CONSTANT
from tests.helpers import compose_config
from tests.train_runs import QUICK, run_train_in_process

from astrai.rollout.rollout import Rollout
from astrai.training.reward_signal import RewardSignalWatch, no_signal_message
from astrai.training.rollout_stats import rollout_metrics
from astrai.training.run import Run

EOS = 1
# the tiny model on addition with the shortest limit the task allows (answers up to 2 digits +
# EOS): its random answers are all cut at it, as SmolLM2's were at 4 tokens in docs/lora.md
SHORT = [*QUICK, "train_type.sampling.max_new_tokens=3", "trainer.total_steps=3"]
TRUNCATED_WARNING = (
    "no learning signal from the reward in steps 1-3: every group's rewards were equal, all 0.5 "
    "(rollout/frac_reward_zero_std 1.0), so every advantage is 0: the update has no gradient "
    "from the reward; every response was cut at max_new_tokens=3 (rollout/truncated_frac "
    "1.0): raise train_type.sampling.max_new_tokens"
)


def _rollout(rewards: list[list[float]], lengths: list[list[int]], eos: list[list[bool]]) -> Any:
    """A prepared rollout of ``[B, G]`` rewards whose responses have ``lengths`` tokens, ending
    with EOS where ``eos`` says (width 4)."""
    b, g = len(rewards), len(rewards[0])
    mask = torch.zeros(b, g, 4, dtype=torch.bool)
    ids = torch.full((b, g, 4), 5)
    for i in range(b):
        for j in range(g):
            mask[i, j, : lengths[i][j]] = True
            if eos[i][j]:
                ids[i, j, lengths[i][j] - 1] = EOS
    return Rollout(
        prompt_ids=torch.ones(b, 2, dtype=torch.long),
        prompt_mask=torch.ones(b, 2, dtype=torch.bool),
        response_ids=ids,
        response_mask=mask,
        logprobs=torch.zeros(b, g, 4),
        rewards=torch.tensor(rewards),
        policy_version=0,
        advantages=torch.zeros(b, g, 4),
    )


def test_rollout_metrics_count_equal_groups_and_truncated_responses() -> None:
    # groups: [1, 1, 1] equal, [0, 1, 0] not, [0.3, 0.3, 0.3] equal -> 2/3
    # responses: 9, of which 3 ended with EOS -> truncated 6/9
    rollout = _rollout(
        [[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.3, 0.3, 0.3]],
        [[4, 2, 4], [4, 4, 1], [3, 4, 4]],
        [[False, True, False], [False, False, True], [True, False, False]],
    )
    metrics = rollout_metrics(rollout, EOS, accuracy_threshold=1.0)
    assert metrics["rollout/frac_reward_zero_std"] == pytest.approx(2 / 3)
    assert metrics["rollout/truncated_frac"] == pytest.approx(6 / 9)
    assert metrics["rollout/truncated_frac"] == pytest.approx(1 - metrics["rollout/eos_frac"])


def test_the_message_names_the_cause_and_the_key() -> None:
    metrics = {"rollout/reward_std": 0.0, "rollout/reward_mean": 0.0, "rollout/truncated_frac": 1}
    text = no_signal_message(7, 3, True, 4, metrics)
    assert text.startswith("no learning signal from the reward in steps 5-7: every group's ")
    assert "all 0 (rollout/frac_reward_zero_std 1.0)" in text
    assert text.endswith(
        "every response was cut at max_new_tokens=4 (rollout/truncated_frac 1.0): raise "
        "train_type.sampling.max_new_tokens"
    )
    # most cut: the limit still blamed, with the share; few cut: the reward is
    some = {"rollout/reward_std": 0.4, "rollout/reward_mean": 0.5, "rollout/truncated_frac": 0.75}
    assert "75% of the responses were cut at max_new_tokens=4" in no_signal_message(
        3, 3, True, 4, some
    )
    few = {**some, "rollout/truncated_frac": 0.1}
    assert "max_new_tokens" not in no_signal_message(3, 3, True, 4, few)
    assert "check that the reward can tell these responses apart" in (
        no_signal_message(3, 3, True, 4, few)
    )
    # a batch baseline (PPO): no group statistic, the whole batch's rewards
    assert "every reward of the batch was equal, all 0, so the advantages" in no_signal_message(
        3, 3, False, 4, metrics
    )


def test_the_watch_warns_once_per_streak(caplog: pytest.LogCaptureFixture) -> None:
    watch = RewardSignalWatch(group_baseline=True, max_new_tokens=4)
    silent = {"rollout/frac_reward_zero_std": 1.0, "rollout/truncated_frac": 1.0}
    signal = {**silent, "rollout/frac_reward_zero_std": 0.5}
    steps = [silent, silent, silent, silent, signal, silent, silent, silent, silent]
    rollout: Any = None  # a group baseline reads the metrics only
    with caplog.at_level(logging.WARNING, logger="astrai.training.trainer"):
        fired = [
            watch.observe(step, rollout, metrics, lambda x: x) is not None
            for step, metrics in enumerate(steps, start=1)
        ]
    # steps 1-3 silent: said at 3, not again at 4; back at 5; silent 6-8: said again at 8
    assert fired == [False, False, True, False, False, False, False, True, False]
    assert [r.getMessage()[:52] for r in caplog.records] == [
        "no learning signal from the reward in steps 1-3: eve",
        "no learning signal from the reward in steps 6-8: eve",
    ]


def test_a_distillation_run_is_not_told_its_reward_is_silent() -> None:
    """Under distill=opd (``watch_reward`` False) the teacher's per-token signal moves the
    policy whatever the rewards: equal rewards step after step say nothing."""
    watch = RewardSignalWatch(group_baseline=True, max_new_tokens=4, watch_reward=False)
    silent = {"rollout/frac_reward_zero_std": 1.0, "rollout/truncated_frac": 1.0}
    rollout: Any = None
    assert [watch.observe(step, rollout, silent, lambda x: x) for step in range(1, 6)] == [None] * 5


def test_a_batch_baseline_needs_every_reward_equal_over_every_rank() -> None:
    watch = RewardSignalWatch(group_baseline=False, max_new_tokens=4, enabled=False, patience=1)
    equal_groups = SimpleNamespace(rewards=torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    metrics = {"rollout/frac_reward_zero_std": 1.0}
    # every group constant, but not the batch: PPO's critic baseline still sees the difference
    assert watch.observe(1, equal_groups, metrics, lambda x: x) is None
    constant = SimpleNamespace(rewards=torch.full((2, 2), 0.25))
    assert watch.observe(2, constant, metrics, lambda x: x) is not None
    # another rank's rewards differ (its max is higher): not silent
    watch.quiet_steps = 0
    other_rank_higher = lambda x: max(x, 0.9)  # noqa: E731
    assert watch.observe(3, constant, metrics, other_rank_higher) is None


def _warnings(text: str) -> list[str]:
    marker = "[astrai.training.trainer][WARNING] - "
    return [line.split(marker, 1)[1] for line in text.splitlines() if marker in line]


def test_a_run_that_cannot_learn_says_so_by_step_3(tmp_path: Path) -> None:
    """The acceptance (issue 45): every response cut at max_new_tokens and every group's
    rewards equal -> the warning by step 3, in train.log and on the console, through
    ``python train.py`` (in-process); the metrics say the same every step."""
    run_dir = tmp_path / "run"
    args = [*SHORT, *CONSTANT, f"hydra.run.dir={run_dir}"]
    result = run_train_in_process(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    for text in (result.stdout, (run_dir / "train.log").read_text()):
        assert _warnings(text) == [TRUNCATED_WARNING]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if row["step"] > 0]
    assert [row["rollout/truncated_frac"] for row in steps] == [1.0, 1.0, 1.0]
    assert [row["rollout/frac_reward_zero_std"] for row in steps] == [1.0, 1.0, 1.0]


def test_a_varying_reward_says_nothing(tmp_path: Path) -> None:
    """The same run with a reward that varies within every group: no warning, though every
    response is still cut at the limit (truncation alone is no missing signal)."""
    run_dir = tmp_path / "run"
    result = run_train_in_process([*SHORT, *ALTERNATING, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _warnings(result.stdout) == []
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["rollout/frac_reward_zero_std"] for row in rows if row["step"] > 0] == [0.0] * 3


def test_ppo_with_a_constant_reward_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = compose_config([*SHORT, *CONSTANT, "train_type=online_ppo", "logger.tensorboard=false"])
    with caplog.at_level(logging.WARNING, logger="astrai.training.trainer"):
        Run(cfg, tmp_path).fit()
    [message] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert message.startswith(
        "no learning signal from the reward in steps 1-3: every reward of the batch was equal, "
        "all 0.5, so the advantages hold nothing from the reward"
    )


def test_every_episode_failing_three_steps_in_a_row_stops_the_run() -> None:
    from astrai.rollout.episodes.calls import EnvironmentFailing

    watch = RewardSignalWatch(group_baseline=True, max_new_tokens=8, enabled=False)
    rollout = _rollout([[0.0, 0.0]], [[1, 1]], [[True, True]])
    failing = {"rollout/frac_reward_zero_std": 1.0, "env/failed": 1.0, "env/failed_invalid": 0.75}
    failing["env/failed_timeout"] = 0.25
    fine = {**failing, "env/failed": 0.5}
    for step, metrics in enumerate([failing, failing, fine, failing, failing], start=1):
        watch.observe(step, rollout, metrics, max)  # a step with one good episode resets it
    with pytest.raises(EnvironmentFailing) as stopped:
        watch.observe(6, rollout, failing, max)
    assert str(stopped.value) == (
        "every episode failed in steps 4-6 (timeout 25%, invalid 75%): the environment cannot "
        "run; the first failure of each cause is logged above"
    )


@pytest.mark.slow  # a real train.py run (~5 s): the fast suite's budget
def test_a_run_whose_every_episode_fails_stops_with_one_line(tmp_path: Path) -> None:
    target = "tests.episode_envs.StepReturnsNone"
    args = [*QUICK, "env=custom", f"env._target_={target}", "env.parser=none"]
    args += ["trainer.total_steps=6", f"hydra.run.dir={tmp_path / 'run'}"]
    result = run_train_in_process(args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == (
        "astrai: environment error: every episode failed in steps 1-3 (invalid 100%): the "
        "environment cannot run; the first failure of each cause is logged above"
    ), result.stderr[-2000:]
