"""A reward that fails during evaluation is reported like one that fails during training: one
``RewardError`` naming the reward and the prompt it failed on."""

from __future__ import annotations

import pytest
import torch

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rewards.base import Reward, RewardError, RewardTerm
from astrai.tasks.base import Problem
from astrai.training.evaluation import evaluate


def _fails_on_seven(
    prompts: list[str], responses: list[str], answers: list[str | None]
) -> list[float]:
    if any("7" in p for p in prompts):
        raise ValueError("cannot score sevens")
    return [0.0] * len(prompts)


@pytest.mark.parametrize("value", [float("nan"), 1e308, "x"])
def test_a_bad_score_during_evaluation_names_the_prompt(value: object) -> None:
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig())
    problems = [Problem("1+2=", "3", "1+2="), Problem("3+4=", "7", "3+4=")]
    reward = Reward([RewardTerm("odd", 1.0, lambda p, r, a: [0.0, value])], 1.0)
    with pytest.raises(RewardError, match=r"reward odd returned .* on prompt '3\+4='"):
        evaluate(policy, CharTokenizer(), reward, problems, max_new_tokens=2)


def test_a_raising_reward_during_evaluation_names_the_prompt() -> None:
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig())
    problems = [Problem("1+2=", "3", "1+2="), Problem("3+7=", "10", "3+7=")]
    reward = Reward([RewardTerm("sevens", 1.0, _fails_on_seven)], 1.0)
    with pytest.raises(
        RewardError, match=r"^reward sevens failed on prompt '3\+7=': cannot score sevens$"
    ):
        evaluate(policy, CharTokenizer(), reward, problems, max_new_tokens=2)
