"""A failed episode (``Rollout.valid`` False) in the trainer's statistics (issue 58): dynamic
sampling judges a group on its valid members, the logged reward statistics count valid
responses only, and ``valid`` survives every way a ``Rollout`` is cut, joined, moved or saved."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from astrai.checkpoints.in_flight import RunShape, check_in_flight_object
from astrai.rollout.rollout import Rollout, cat_rollouts
from astrai.tasks.base import Problem
from astrai.training.rollout_stats import rollout_metrics
from astrai.training.sampling.dynamic_sampling import informative_groups, sample_informative
from astrai.training.sampling.in_flight import SampledBatch, batch_from_record, batch_record

EOS = 1


def _rollout(
    rewards: list[list[float]], valid: list[list[bool]] | None, length: int = 3
) -> Rollout:
    """B groups of G responses of ``length`` tokens, the last one EOS; advantages pinned (0)."""
    b, g = len(rewards), len(rewards[0])
    ids = torch.full((b, g, length), 5)
    ids[..., -1] = EOS
    return Rollout(
        prompt_ids=torch.ones(b, 2, dtype=torch.long),
        prompt_mask=torch.ones(b, 2, dtype=torch.bool),
        response_ids=ids,
        response_mask=torch.ones(b, g, length, dtype=torch.bool),
        logprobs=torch.full((b, g, length), -1.0),
        rewards=torch.tensor(rewards),
        policy_version=0,
        prompts=[f"p{i}" for i in range(b)],
        responses=[[f"p{i}.{j}" for j in range(g)] for i in range(b)],
        sample_versions=torch.zeros(b, g, dtype=torch.long),
        valid=None if valid is None else torch.tensor(valid),
    )


def test_a_group_unequal_only_through_a_failure_is_not_informative() -> None:
    rewards = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    valid = torch.tensor(
        [[True, True, True, False], [True, True, False, False], [True] + [False] * 3]
    )
    # row 0: the valid three are alike; row 1: 1 vs 0; row 2: one valid member
    assert informative_groups(rewards, valid).tolist() == [False, True, False]
    assert informative_groups(rewards).tolist() == [True, True, True]  # unmasked, as before


def test_dynamic_sampling_filters_and_counts_on_the_valid_members() -> None:
    # round 0: group 0 differs only through its failed episode -> filtered; group 1 informative
    # round 1: one informative group -> the step has its 2
    rounds = [
        _rollout([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], [[True, True, False], [True] * 3]),
        _rollout([[0.0, 1.0, 1.0], [2.0, 2.0, 2.0]], [[True] * 3, [True] * 3]),
    ]
    draws = iter(rounds)
    batch, metrics = sample_informative(
        lambda problems: next(draws),
        lambda k: [Problem(f"{k}.{i}", None, f"{k}.{i}") for i in range(2)],
        needed=2,
        max_rounds=3,
        pad_id=0,
    )
    assert metrics == {"rollout/filtered_groups": 2.0, "rollout/resample_rounds": 1.0}
    assert batch.rewards.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    assert batch.valid is not None and batch.valid.all()  # the kept groups are all valid


def test_reward_statistics_count_the_valid_responses_only() -> None:
    # rewards [1, 1, 1, 0] with the 0 a failed episode, [1, 0, 1, 0] all valid:
    #   valid rewards 1, 1, 1, 1, 0, 1, 0: mean 5/7, E[r²] 5/7, var 5/7 - 25/49 = 10/49
    #   accuracy (reward >= 1) 5/7; group 0 has no signal over its valid members -> 1/2
    #   lengths and EOS over all 8 responses (3 tokens, all EOS)
    rollout = _rollout(
        [[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]], [[True] * 3 + [False], [True] * 4]
    )
    rollout.advantages = torch.zeros(2, 4, 3)
    metrics = rollout_metrics(rollout, EOS, accuracy_threshold=1.0)
    assert metrics["rollout/reward_mean"] == pytest.approx(5 / 7)
    assert metrics["rollout/reward_std"] == pytest.approx((10 / 49) ** 0.5)
    assert metrics["rollout/accuracy"] == pytest.approx(5 / 7)
    assert metrics["rollout/frac_reward_zero_std"] == pytest.approx(1 / 2)
    assert metrics["rollout/response_len"] == pytest.approx(3.0)
    assert metrics["rollout/eos_frac"] == pytest.approx(1.0)


def test_valid_none_gives_the_statistics_of_all_responses() -> None:
    rewards = [[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]]
    plain, marked = _rollout(rewards, None), _rollout(rewards, [[True] * 4, [True] * 4])
    for rollout in (plain, marked):
        rollout.advantages = torch.zeros(2, 4, 3)
    expected = rollout_metrics(plain, EOS, 1.0)
    assert expected["rollout/reward_mean"] == pytest.approx(5 / 8)
    assert rollout_metrics(marked, EOS, 1.0) == expected


def test_valid_survives_select_take_to_and_cat() -> None:
    rollout = _rollout(
        [[1.0, 0.0], [2.0, 3.0], [4.0, 5.0]], [[True, False], [True, True], [False, True]]
    )
    assert rollout.select(slice(1, 3)).valid.tolist() == [[True, True], [False, True]]
    assert rollout.take([2, 0]).valid.tolist() == [[False, True], [True, False]]
    assert rollout.to("cpu").valid.tolist() == rollout.valid.tolist()
    one_turn = _rollout([[6.0, 7.0]], None, length=2)
    joined = cat_rollouts([rollout, one_turn], pad_id=0)
    # the part without ``valid`` has every response valid
    assert joined.valid.tolist() == [[True, False], [True, True], [False, True], [True, True]]
    assert cat_rollouts([one_turn, one_turn], pad_id=0).valid is None


def test_valid_goes_through_an_in_flight_checkpoint(tmp_path: Path) -> None:
    rollout = _rollout([[1.0, 0.0]], [[True, False]])
    record = batch_record(SampledBatch(step=3, rollout=rollout, metrics={}, sample_s=0.5))
    state = {"step": 2, "in_flight": 1, "policy_version": 0, "world_size": 1}
    shape = RunShape(world_size=1, prompts_per_step=1, group_size=2)
    checked = check_in_flight_object({"per_rank": [[record]]}, state, tmp_path / "f.pt", shape)
    restored = batch_from_record(checked[0][0], torch.device("cpu"))
    assert restored.rollout.valid.tolist() == [[True, False]]
    # one written before ``valid`` existed: every response valid
    old = {**record, "rollout": {k: v for k, v in record["rollout"].items() if k != "valid"}}
    check_in_flight_object({"per_rank": [[old]]}, state, tmp_path / "f.pt", shape)
    assert batch_from_record(old, torch.device("cpu")).rollout.valid is None
    # a float ``valid`` is refused by name
    bad = {**record, "rollout": {**record["rollout"], "valid": torch.ones(1, 2)}}
    with pytest.raises(Exception, match="'valid' is torch.float32, not bool"):
        check_in_flight_object({"per_rank": [[bad]]}, state, tmp_path / "f.pt", shape)
