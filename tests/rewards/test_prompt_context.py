"""A reward sees the prompt the policy answered: a reward that names ``messages`` or
``rendered_prompts`` (or takes ``**kwargs``) gets the whole conversation and its rendered text,
in training rollouts, evaluation, ``generate --task`` and the pre-run probe; one written as
``fn(prompts, responses, answers)`` is called exactly as before."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.helpers import write_byte_level_tokenizer

from astrai.generate import Scoring, score
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.saved_tokenizer import load_tokenizer
from astrai.models.tokenizer import CharTokenizer
from astrai.rewards.base import (
    Reward,
    RewardConfigError,
    RewardTerm,
    context_keywords,
)
from astrai.rewards.build import build_reward
from astrai.rollout.collect import score_responses
from astrai.tasks.base import Problem
from astrai.tasks.dataset import DatasetTask
from astrai.training.evaluation import evaluate

# ChatML, as SmolLM2's: a default system turn only when the conversation has none
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SYSTEM = {"role": "system", "content": "Answer with one number."}
Turns = list[list[dict[str, str]]]


def _problems(tmp_path: Path) -> list[Problem]:
    """Two training rows of ``task=dataset`` with ``task.system_prompt``: a string prompt and
    an instruction row (instruction = system turn, input = user turn)."""
    rows = [
        {"prompt": "What is 2+3?", "answer": "5"},
        {
            "prompt": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": "What is 7+1?"},
            ],
            "answer": "8",
        },
    ]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"prompt": "What is 1+1?", "answer": "2"}) + "\n")
    task = DatasetTask(str(train), str(evals), 0.1, "prompt", "answer", SYSTEM["content"])
    return task.train


def test_a_reward_that_names_messages_gets_the_conversation_the_policy_answered(
    tmp_path: Path,
) -> None:
    problems = _problems(tmp_path)
    seen: dict[str, Any] = {}

    def judge(
        prompts: list[str], responses: list[str], answers: list[str | None], messages: Turns
    ) -> list[float]:
        seen.update(prompts=prompts, messages=messages)
        return [float(len(m)) for m in messages]  # the number of turns

    def plain(prompts: list[str], responses: list[str], answers: list[str | None]) -> list[float]:
        return [0.5] * len(responses)  # today's signature: no keyword arguments reach it

    reward = Reward([RewardTerm("judge", 1.0, judge), RewardTerm("plain", 1.0, plain)], 1.0)
    assert reward.takes == ("messages",) and context_keywords(plain) == ()
    rewards, terms = score_responses(reward, problems, [["5", "6"], ["8", "9"]])

    first = [SYSTEM, {"role": "user", "content": "What is 2+3?"}]
    second = [
        SYSTEM,
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "What is 7+1?"},
    ]
    assert seen["messages"] == [first, first, second, second]  # one per response
    assert seen["prompts"] == ["What is 2+3?"] * 2 + ["What is 7+1?"] * 2  # as before
    assert terms["judge"].tolist() == [[2.0, 2.0], [4.0, 4.0]]
    assert rewards.tolist() == [[2.5, 2.5], [4.5, 4.5]]


def test_kwargs_get_messages_and_the_rendered_prompt(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(write_byte_level_tokenizer(tmp_path / "tok", CHATML))
    problems = _problems(tmp_path)
    seen: dict[str, Any] = {}

    def trl_style(prompts: list[str], responses: list[str], *_: Any, **kwargs: Any) -> list[float]:
        seen.update(kwargs)
        return [0.0] * len(responses)

    reward = Reward([RewardTerm("trl", 1.0, trl_style)], 1.0)
    score_responses(reward, problems, [["5"], ["8"]], tokenizer)
    assert sorted(seen) == ["messages", "rendered_prompts"]
    assert seen["rendered_prompts"][0] == (
        "<|im_start|>system\nAnswer with one number.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert seen["rendered_prompts"][1] == tokenizer.render_prompt(problems[1].prompt)
    assert "<|im_start|>assistant\nHello<|im_end|>" in seen["rendered_prompts"][1]


def test_evaluation_and_generate_pass_the_conversation() -> None:
    """The embedded tasks' string prompts reach such a reward as one user turn."""
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig())
    problems = [Problem("1+2=", "3", "1+2="), Problem("3+4=", "7", "3+4=")]
    got: list[Any] = []

    def judge(
        prompts: list[str],
        responses: list[str],
        answers: Any,
        *,
        messages: Turns,
        rendered_prompts: list[str],
    ) -> list[float]:
        got.append((messages, rendered_prompts))
        return [1.0] * len(responses)

    reward = Reward([RewardTerm("judge", 1.0, judge)], 1.0)
    result = evaluate(policy, CharTokenizer(), reward, problems, max_new_tokens=2)
    assert result.reward_mean == 1.0
    turns = [[{"role": "user", "content": "1+2="}], [{"role": "user", "content": "3+4="}]]
    assert got == [(turns, ["1+2=", "3+4="])]
    rewards, _ = score(Scoring(problems, "x", reward=reward), ["3", "7"], CharTokenizer())
    assert rewards == [1.0, 1.0] and got[1] == got[0]


def test_a_config_key_named_like_the_context_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ctx_rewards.py").write_text(
        "def judge(prompts, responses, answers, messages, max_turns=3):\n"
        "    return [float(len(m) <= max_turns) for m in messages]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ctx_rewards", raising=False)
    node = {"_target_": "ctx_rewards.judge", "accuracy_threshold": 1.0, "max_turns": 1}
    reward = build_reward(node)  # a required ``messages`` passes the signature check
    assert reward.takes == ("messages",)
    turns = [[{"role": "user", "content": "a"}], [SYSTEM, {"role": "user", "content": "b"}]]
    assert reward.score(["a", "b"], ["", ""], [None, None], messages=turns)[0] == [1.0, 0.0]
    with pytest.raises(ValueError, match="takes messages: pass one per response"):
        reward.score(["a"], [""], [None])
    with pytest.raises(RewardConfigError, match=r"^reward\.messages: astrai passes messages"):
        build_reward({**node, "messages": []})
