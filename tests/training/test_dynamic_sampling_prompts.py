"""Dynamic sampling's prompts through the real trainer: an extra round samples only prompts no
earlier round of its step used, at the default task (1-digit addition: 87 training prompts) and
on a dataset too small to fill a round, where the rounds shrink and then end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.helpers import compose_config

import astrai.rollout.collectors as collectors  # where the single-turn rollouts are sampled
from astrai.rollout.rollout import Rollout
from astrai.training.run import Run
from astrai.training.sampling.rollout_source import RolloutSource

FILTERED = [
    "debug=quick",
    "trainer.total_steps=2",
    "trainer.eval_prompts=1",
    "train_type.group_size=2",
    "train_type.minibatches=1",
    "train_type.sampling.max_new_tokens=3",
    "train_type.filter_groups=true",
    "train_type.max_resample_rounds=3",
    "logger.tensorboard=false",
]


def _record_rounds(monkeypatch: pytest.MonkeyPatch) -> list[list[list[str]]]:
    """Every group all-equal (so each step samples all the rounds it can); returns, per step,
    each round's prompts in sampling order."""
    steps: list[list[list[str]]] = []
    collect = collectors.collect_rollout
    rollout = RolloutSource.rollout

    def collect_equal(*args: Any, **kwargs: Any) -> Rollout:
        problems = args[2]  # collect_rollout(policy, tokenizer, problems, ...)
        steps[-1].append([p.text for p in problems])
        sampled = collect(*args, **kwargs)
        sampled.rewards = torch.zeros_like(sampled.rewards)
        return sampled

    def step_rollout(self: RolloutSource) -> Rollout:
        steps.append([])
        return rollout(self)

    monkeypatch.setattr(collectors, "collect_rollout", collect_equal)
    monkeypatch.setattr(RolloutSource, "rollout", step_rollout)
    return steps


def _assert_no_round_repeats(rounds: list[list[str]]) -> None:
    for index, prompts in enumerate(rounds[1:], start=1):
        earlier = {p for r in rounds[:index] for p in r}
        assert not earlier & set(prompts), f"round {index} repeats {earlier & set(prompts)}"
        assert len(set(prompts)) == len(prompts), f"round {index} repeats itself"


def test_extra_rounds_never_repeat_the_steps_prompts_at_the_default_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = _record_rounds(monkeypatch)
    Run(compose_config([*FILTERED, "train_type.prompts_per_step=8"]), tmp_path).fit()
    assert len(steps) == 2
    for rounds in steps:
        assert len(rounds) == 4 and len(rounds[0]) == 8  # all-equal groups: every round
        _assert_no_round_repeats(rounds)
        # 87 training prompts: round 0's (up to 8) and 3 × 8 new ones fit among them
        assert [len(r) for r in rounds[1:]] == [8, 8, 8]


def _write_rows(path: Path, sums: list[tuple[int, int]]) -> Path:
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in sums]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_dataset_too_small_for_a_round_shrinks_then_ends_the_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train = _write_rows(tmp_path / "train.jsonl", [(1, 2), (3, 4), (5, 1), (2, 2), (6, 3), (7, 1)])
    evals = _write_rows(tmp_path / "eval.jsonl", [(4, 4)])
    steps = _record_rounds(monkeypatch)
    task = ["task=dataset", f"task.train_path={train}", f"task.eval_path={evals}"]
    cfg = compose_config([*FILTERED, *task, "train_type.prompts_per_step=4"])
    with pytest.warns(UserWarning, match="fewer unseen training prompts"):
        Run(cfg, tmp_path / "run").fit()
    everything = {"1+2=", "3+4=", "5+1=", "2+2=", "6+3=", "7+1="}
    assert len(steps) == 2
    for rounds in steps:
        _assert_no_round_repeats(rounds)
        # round 0 takes 4 rows (fewer distinct where it crosses an epoch); round 1 every row
        # left; then none is left: the rounds end there, though max_resample_rounds=3
        assert len(rounds) == 2 and len(rounds[0]) == 4
        assert set(rounds[0]) | set(rounds[1]) == everything
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [row["rollout/resample_rounds"] for row in rows if "rollout/resample_rounds" in row] == [
        1.0
    ] * 2
