"""Scoring a rollout: a reward per response; a broken reward function is fatal."""

from __future__ import annotations

import math

import pytest
import torch

from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rewards.base import Reward, RewardError, RewardTerm
from astrai.rewards.builtin import partial_credit
from astrai.rollout.collect import collect_rollout, score_responses
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.tasks import AdditionTask
from astrai.tasks.base import Problem

PARTIAL = Reward([RewardTerm("partial", 1.0, partial_credit)], accuracy_threshold=1.0)


def problems(*prompts: str) -> list[Problem]:
    return AdditionTask().eval_problems(0) + [
        Problem(p, AdditionTask().answer(p), p) for p in prompts
    ]


def single(fn: object) -> Reward:
    return Reward([RewardTerm("mine", 1.0, fn)], accuracy_threshold=1.0)  # type: ignore[arg-type]


def test_score_responses_shape_and_values() -> None:
    rewards, terms = score_responses(PARTIAL, problems("3+5=", "9+9="), [["8", "9"], ["18", "1"]])
    torch.testing.assert_close(rewards, torch.tensor([[1.0, 0.0], [1.0, 0.5]]))
    assert list(terms) == ["partial"]
    torch.testing.assert_close(terms["partial"], rewards)


def test_weighted_terms_sum_with_their_weights() -> None:
    def long(prompts: list[str], responses: list[str], answers: list[str | None]) -> list[float]:
        return [float(len(r) > 1) for r in responses]

    reward = Reward(
        [RewardTerm("partial", 0.75, partial_credit), RewardTerm("long", 0.25, long)], 1.0
    )
    rewards, terms = score_responses(reward, problems("9+9="), [["18", "1", "8"]])
    # partial: "18" 1, "1" 0.5 (its one position of two matches), "8" 0 ('8' != '1'); long 1, 0, 0
    torch.testing.assert_close(rewards, torch.tensor([[1.0, 0.375, 0.0]]))
    torch.testing.assert_close(terms["long"], torch.tensor([[1.0, 0.0, 0.0]]))


def test_raising_reward_names_the_reward_and_the_prompt() -> None:
    def broken(prompts: list[str], responses: list[str], answers: list[str | None]) -> list[float]:
        if "7+1=" in prompts:
            raise KeyError("boom")
        return [0.0] * len(prompts)

    # the batch raises; scoring each pair alone finds the prompt that makes it raise
    with pytest.raises(RewardError, match=r"reward mine failed on prompt '7\+1='"):
        score_responses(single(broken), problems("3+5=", "7+1="), [["8"], ["8"]])


@pytest.mark.parametrize("value", [math.nan, math.inf, 1e308, "x", None])
def test_non_finite_reward_names_the_prompt(value: object) -> None:
    def fn(prompts: list[str], responses: list[str], answers: list[str | None]) -> list[object]:
        return [value]

    with pytest.raises(RewardError, match=r"reward mine returned .* on prompt '2\+2='"):
        score_responses(single(fn), problems("2+2="), [["4"]])


def test_a_wrong_count_names_the_reward() -> None:
    def fn(prompts: list[str], responses: list[str], answers: list[str | None]) -> list[float]:
        return [1.0]

    with pytest.raises(RewardError, match=r"reward mine returned 1 scores for 2 responses"):
        score_responses(single(fn), problems("2+2="), [["4", "5"]])


def test_collect_rollout_shapes_and_texts(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    task = AdditionTask()
    prompts = ["3+5=", "1+7=", "0+0="]
    rollout = collect_rollout(
        tiny_model, tokenizer, problems(*prompts), group_size=4,
        sampling=SamplingConfig(max_new_tokens=5), reward=PARTIAL, policy_version=7,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    b, g, r = rollout.response_ids.shape
    assert (b, g) == (3, 4) and r <= 5
    assert rollout.logprobs.shape == rollout.response_mask.shape == (3, 4, r)
    assert rollout.rewards.shape == (3, 4)
    assert rollout.policy_version == 7
    assert rollout.prompt_ids.shape[0] == 3 and rollout.prompt_mask[:, -1].all()
    for bi in range(3):
        for gi in range(4):
            text = rollout.responses[bi][gi]
            expected = task.reward(prompts[bi], text)
            assert rollout.rewards[bi, gi].item() == pytest.approx(expected)
            ids = rollout.response_ids[bi, gi][rollout.response_mask[bi, gi]].tolist()
            assert tokenizer.decode(ids) == text
