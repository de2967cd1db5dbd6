"""DAPO dynamic sampling (``train_type.filter_groups``): which groups a step keeps, how many
rounds it samples, which prompts an extra round draws, what it logs; and mask_truncated's loss
mask."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch

from astrai.rollout.rollout import Rollout, cat_rollouts, ended_with_eos
from astrai.tasks.base import Problem
from astrai.training.sampling.dynamic_sampling import (
    StepPrompts,
    draw_unseen,
    informative_groups,
    prompt_key,
    sample_informative,
)

PAD = 0


def _problems(texts: str) -> list[Problem]:
    """One problem per character: ``"aab"`` -> prompts a, a, b."""
    return [Problem(t, None, t) for t in texts]


def _texts(problems: list[Problem]) -> str:
    return "".join(p.text for p in problems)


def _stream(*draws: str) -> Callable[[int], list[Problem]]:
    """draw k -> the prompts of ``draws[k]``, cycling; the draws asked for in ``.asked``."""
    asked: list[int] = []

    def draw(k: int) -> list[Problem]:
        asked.append(k)
        return _problems(draws[k % len(draws)])

    draw.asked = asked  # type: ignore[attr-defined]
    return draw


def _fresh_draws(size: int) -> Callable[[int], list[Problem]]:
    """draw k -> ``size`` prompts no other draw has: ``k.0``, ``k.1``..."""
    return lambda k: [Problem(f"{k}.{i}", None, f"{k}.{i}") for i in range(size)]


def _by_prefix(rounds: dict[str, Rollout], asked: list[str]) -> Callable[[list[Problem]], Rollout]:
    """sample: a round's prompts -> the rollout named by its first prompt (appended to
    ``asked``)."""

    def sample(problems: list[Problem]) -> Rollout:
        asked.append(problems[0].text)
        return rounds[problems[0].text]

    return sample


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
    asked: list[str] = []
    sample = _by_prefix({"0.0": rounds[0], "1.0": rounds[1], "2.0": rounds[2]}, asked)
    batch, metrics = sample_informative(sample, _fresh_draws(4), needed=4, max_rounds=3, pad_id=PAD)
    assert asked == ["0.0", "1.0", "2.0"]  # round 2 brought the count to 5 >= 4: no round 3
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
    batch, metrics = sample_informative(
        lambda p: first, _fresh_draws(2), needed=2, max_rounds=3, pad_id=PAD
    )
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "logprobs"):
        assert torch.equal(getattr(batch, name), getattr(first, name))
    assert metrics == {"rollout/filtered_groups": 0.0, "rollout/resample_rounds": 0.0}


def test_rounds_run_out_then_dropped_groups_fill_the_step() -> None:
    rounds = [_rollout([[0, 0], [0, 1], [1, 1]], "a"), _rollout([[1, 1], [0, 0], [1, 1]], "b")]
    sample = _by_prefix({"0.0": rounds[0], "1.0": rounds[1]}, [])
    batch, metrics = sample_informative(sample, _fresh_draws(3), needed=3, max_rounds=1, pad_id=PAD)
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

    rounds = {"0.0": _rollout([[0, 1], [1, 0]], "a"), "1.0": _rollout([[0, 1], [1, 1]], "b")}
    asked: list[str] = []
    batch, metrics = sample_informative(
        _by_prefix(rounds, asked), _fresh_draws(2), 2, 3, PAD, sum_over_ranks=other_ranks
    )
    assert asked == ["0.0", "1.0"]
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


def test_cat_rollouts_keeps_the_collectors_loss_masks() -> None:
    """``mask_truncated`` and an episode's failures are in ``loss_mask`` from collection on
    (``rollout.collectors``): joined rounds keep them, right-padded False; a round without one
    trains on its every response token."""
    masked = _rollout([[0, 1]], "a", length=2)
    masked.loss_mask = torch.tensor([[[True, True], [False, False]]])
    plain = _rollout([[1, 0]], "b", length=3)
    joined = cat_rollouts([masked, plain], PAD)
    assert joined.loss_mask is not None
    assert joined.loss_mask.tolist() == [
        [[True, True, False], [False, False, False]],
        [[True, True, True], [True, True, True]],
    ]
    assert cat_rollouts([plain, plain], PAD).loss_mask is None


def test_ended_with_eos_marks_responses_cut_at_the_limit() -> None:
    eos = 2
    ids = torch.tensor([[7, 2, 0, 0], [7, 7, 7, 7], [7, 7, 7, 2], [0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]]).bool()
    assert ended_with_eos(ids, mask, eos).tolist() == [True, False, True, False]


def test_an_extra_round_draws_only_prompts_the_step_has_not_used() -> None:
    seen = {"a", "b"}
    draw = _stream("acad", "ebfg", "hi")
    draws = itertools.count()
    # draw 0 gives c, d (a is seen, the second c a repeat); draw 1 gives e, then f fills it
    assert _texts(draw_unseen(draw, draws, 4, seen)) == "cdef"
    assert seen == set("abcdef") and draw.asked == [0, 1]  # type: ignore[attr-defined]
    # the next round goes on from draw 2 (g, left in draw 1, is not taken back up)
    assert _texts(draw_unseen(draw, draws, 2, seen)) == "hi"
    assert draw.asked == [0, 1, 2]  # type: ignore[attr-defined]


def test_a_short_stream_gives_a_smaller_round_cut_to_a_multiple_of_the_ranks() -> None:
    seen = set("ab")
    draw = _stream("abcd", "aecd", "bade", "abce")  # c, d, e are all there is to find
    problems = draw_unseen(draw, itertools.count(), 4, seen, multiple_of=2, max_draws=8)
    assert _texts(problems) == "cd"  # c, d, e found in 8 draws: cut to 2 for 2 ranks
    assert seen == set("abcd") and len(draw.asked) == 8  # type: ignore[attr-defined]
    assert draw_unseen(draw, itertools.count(), 4, set("abcde"), max_draws=3) == []


def test_step_prompts_round_0_is_the_step_batch_then_rounds_never_repeat() -> None:
    rounds = StepPrompts(_stream("aab", "abcd", "defg", "abcdefg"), size=3, multiple_of=1)
    assert _texts(rounds.next_round()) == "aab"  # the step's own prompts, repeat and all
    assert _texts(rounds.next_round()) == "cde"  # draw 1 gives c, d; draw 2 d (seen), e
    with pytest.warns(UserWarning, match="fewer unseen training prompts"):
        assert _texts(rounds.next_round()) == "fg"  # draw 3 on: nothing else is new
    with pytest.warns(UserWarning, match="fewer unseen training prompts"):
        assert rounds.next_round() == []


def test_chat_prompts_are_the_same_prompt_only_when_every_turn_is() -> None:
    def chat(system: str, user: str) -> Problem:
        turns = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return Problem(turns, None, user)

    assert prompt_key(chat("Be brief.", "1+1=")) == prompt_key(chat("Be brief.", "1+1="))
    assert prompt_key(chat("Be brief.", "1+1=")) != prompt_key(chat("Show work.", "1+1="))
    assert prompt_key(Problem("1+1=", "2", "1+1=")) == "1+1="


def test_the_rounds_end_when_the_task_has_no_unseen_prompt_left() -> None:
    # a 3-prompt task, 2 prompts a round, every group all-equal: round 1 finds c alone (one
    # group), round 2 nothing, so no round 2 is sampled though max_rounds allows 3
    rounds = {"a": _rollout([[1, 1], [0, 0]], "a"), "c": _rollout([[1, 1]], "c")}
    asked: list[str] = []
    with pytest.warns(UserWarning, match="fewer unseen training prompts"):
        batch, metrics = sample_informative(
            _by_prefix(rounds, asked), _stream("ab", "bcab"), needed=2, max_rounds=3, pad_id=PAD
        )
    assert asked == ["a", "c"]
    assert batch.prompts == ["a0", "a1"]  # dropped groups fill the step, in sampling order
    assert metrics == {"rollout/filtered_groups": 3.0, "rollout/resample_rounds": 1.0}
