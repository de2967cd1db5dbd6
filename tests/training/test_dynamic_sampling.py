"""DAPO dynamic sampling (``train_type.filter_groups``): which groups a step keeps, how many
rounds it samples, what it logs; and mask_truncated's loss mask."""

from __future__ import annotations

import torch

from astrai.rollout.rollout import Rollout, cat_rollouts, ended_with_eos
from astrai.training.dynamic_sampling import informative_groups, sample_informative

PAD = 0


def _rollout(rewards: list[list[float]], tag: str, width: int = 2, length: int = 3) -> Rollout:
    """B groups of G responses; prompt ``tag<b>`` and a response length that names the round."""
    b, g = len(rewards), len(rewards[0])
    return Rollout(
        prompt_ids=torch.ones(b, width, dtype=torch.long),
        prompt_mask=torch.ones(b, width, dtype=torch.bool),
        response_ids=torch.full((b, g, length), 5),
        response_mask=torch.ones(b, g, length, dtype=torch.bool),
        logprobs=torch.full((b, g, length), -1.0),
        rewards=torch.tensor(rewards),
        policy_version=0,
        prompts=[f"{tag}{i}" for i in range(b)],
        responses=[[f"{tag}{i}.{j}" for j in range(g)] for i in range(b)],
        reward_terms={"score": torch.tensor(rewards)},
    )


def test_informative_groups_are_those_with_unequal_rewards() -> None:
    rewards = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.5], [1.0, 1.0, 0.9]])
    assert informative_groups(rewards).tolist() == [False, True, False, True]


def test_rounds_until_enough_informative_groups_in_sampling_order() -> None:
    rounds = {
        0: _rollout([[0, 1], [1, 1], [0, 0], [1, 0]], "a"),  # a0, a3 informative
        1: _rollout([[1, 1], [0, 0], [1, 1], [1, 1]], "b", width=3, length=5),  # none
        2: _rollout([[0, 0], [0, 1], [1, 0], [0, 1]], "c"),  # c1, c2, c3
    }
    asked: list[int] = []

    def sample(round_index: int) -> Rollout:
        asked.append(round_index)
        return rounds[round_index]

    batch, metrics = sample_informative(sample, needed=4, max_rounds=3, pad_id=PAD)
    assert asked == [0, 1, 2]  # round 2 brought the count to 5 >= 4: no round 3
    assert batch.prompts == ["a0", "a3", "c1", "c2"]
    assert batch.rewards.tolist() == [[0, 1], [1, 0], [0, 1], [1, 0]]
    assert batch.reward_terms["score"].tolist() == batch.rewards.tolist()
    # round 1's wider prompts and longer responses set the padded shape
    assert batch.prompt_ids.shape == (4, 3) and batch.response_ids.shape == (4, 2, 5)
    assert not batch.prompt_mask[:, 0].any() and batch.prompt_mask[:, 1:].all()  # left padding
    assert batch.response_mask[..., :3].all() and not batch.response_mask[..., 3:].any()
    assert (batch.response_ids[..., 3:] == PAD).all() and (batch.logprobs[..., 3:] == 0).all()
    # all-equal groups sampled: 2 in round 0, 4 in round 1, 1 in round 2
    assert metrics == {"rollout/filtered_groups": 7.0, "rollout/resample_rounds": 2.0}


def test_first_round_enough_returns_the_step_unchanged() -> None:
    first = _rollout([[0, 1], [1, 0]], "a")
    batch, metrics = sample_informative(lambda r: first, needed=2, max_rounds=3, pad_id=PAD)
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "logprobs"):
        assert torch.equal(getattr(batch, name), getattr(first, name))
    assert metrics == {"rollout/filtered_groups": 0.0, "rollout/resample_rounds": 0.0}


def test_rounds_run_out_then_dropped_groups_fill_the_step() -> None:
    rounds = [_rollout([[0, 0], [0, 1], [1, 1]], "a"), _rollout([[1, 1], [0, 0], [1, 1]], "b")]
    batch, metrics = sample_informative(lambda r: rounds[r], needed=3, max_rounds=1, pad_id=PAD)
    # the one informative group, then dropped groups in sampling order
    assert batch.prompts == ["a1", "a0", "a2"]
    assert metrics == {"rollout/filtered_groups": 5.0, "rollout/resample_rounds": 1.0}


def test_ranks_sample_the_same_number_of_rounds() -> None:
    # this rank has enough after round 0, another rank does not (its "short" flag is 1 in
    # round 0 only): both take round 1, and the filtered count sums both ranks' (3 elsewhere)
    flags = iter([1.0, 0.0])

    def other_ranks(x: torch.Tensor) -> torch.Tensor:
        if x.numel() == 1 and x.item() in (0.0, 1.0) and x.dtype == torch.float64:
            try:
                return x + next(flags)
            except StopIteration:
                return x + 3.0  # the final filtered count: the other rank dropped 3 groups
        raise AssertionError(x)

    rounds = [_rollout([[0, 1], [1, 0]], "a"), _rollout([[0, 1], [1, 1]], "b")]
    asked: list[int] = []

    def sample(round_index: int) -> Rollout:
        asked.append(round_index)
        return rounds[round_index]

    batch, metrics = sample_informative(sample, 2, 3, PAD, sum_over_ranks=other_ranks)
    assert asked == [0, 1]
    assert batch.prompts == ["a0", "a1"]
    assert metrics == {"rollout/filtered_groups": 4.0, "rollout/resample_rounds": 1.0}


def test_cat_rollouts_refuses_prepared_rollouts() -> None:
    prepared = _rollout([[0, 1]], "a")
    prepared.advantages = torch.zeros(1, 2, 3)
    try:
        cat_rollouts([prepared], PAD)
    except ValueError as err:
        assert "before Strategy.prepare" in str(err)
    else:
        raise AssertionError("a prepared rollout was joined")


def test_ended_with_eos_marks_responses_cut_at_the_limit() -> None:
    eos = 2
    ids = torch.tensor([[7, 2, 0, 0], [7, 7, 7, 7], [7, 7, 7, 2], [0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]]).bool()
    assert ended_with_eos(ids, mask, eos).tolist() == [True, False, True, False]
