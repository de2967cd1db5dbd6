"""Scoring a rollout: a reward per response; a broken reward function is fatal."""

from __future__ import annotations

import math

import pytest
import torch

from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import RewardError, collect_rollout, score_responses
from astrai.rollout.sampler import SamplingConfig
from astrai.tasks import AdditionTask


def test_score_responses_shape_and_values() -> None:
    task = AdditionTask()
    rewards = score_responses(task.reward, ["3+5=", "9+9="], [["8", "9"], ["18", "1"]])
    torch.testing.assert_close(rewards, torch.tensor([[1.0, 0.0], [1.0, 0.5]]))


def test_raising_reward_names_the_prompt() -> None:
    def broken(prompt: str, response: str) -> float:
        raise KeyError("boom")

    with pytest.raises(RewardError, match=r"'7\+1='"):
        score_responses(broken, ["7+1="], [["8"]])


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_reward_names_the_prompt(value: float) -> None:
    with pytest.raises(RewardError, match=r"'2\+2='"):
        score_responses(lambda p, r: value, ["2+2="], [["4"]])


def test_collect_rollout_shapes_and_texts(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    task = AdditionTask()
    prompts = ["3+5=", "1+7=", "0+0="]
    rollout = collect_rollout(
        tiny_model, tokenizer, prompts, group_size=4,
        sampling=SamplingConfig(max_new_tokens=5), reward_fn=task.reward, policy_version=7,
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
