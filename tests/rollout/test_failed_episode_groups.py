"""A failed episode is marked invalid in its ``Rollout`` (``valid``, issue 58), so the group
baseline compares the episodes that ran: two successes and a step that raised are two alike
rewards (no signal), not a push of each success caused by the fault."""

from __future__ import annotations

import torch
from tests.scripted_engine import GREEDY, TOKENIZER, Scripted

from astrai.algorithms.advantages import group_advantages
from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn
from astrai.rollout.episodes.env_spec import env_spec
from astrai.rollout.episodes.rollout import episodes_rollout, play_episodes
from astrai.tasks.arithmetic import ProductTask


class FailsOnNine(Environment):
    """Pays 1 for any answer; its step raises on the answer ``9`` (a tool that crashed)."""

    def reset(self, row: dict) -> list[Message]:
        return [{"role": "user", "content": row["text"]}]

    def step(self, turn: ParsedTurn) -> StepResult:
        if turn.content == "9":
            raise RuntimeError("the tool crashed")
        return StepResult(reward=1.0, done=True)


def test_a_failed_episode_is_invalid_and_leaves_the_group_baseline() -> None:
    spec = env_spec({"_target_": f"{__name__}.FailsOnNine", "workers": "thread"})
    assert spec is not None
    problems = ProductTask().train_problems(0, 0, 1)
    episodes = play_episodes(
        Scripted([["1", "1", "9"]]), TOKENIZER, spec, problems, 3, GREEDY, 64, None, 0, "cpu"
    )
    rollout = episodes_rollout(episodes, problems, TOKENIZER.pad_id, TOKENIZER.decode, 0, 1.0)
    assert rollout.rewards.tolist() == [[1.0, 1.0, 0.0]]
    assert rollout.valid is not None and rollout.valid.tolist() == [[True, True, False]]
    # over all three: mean 2/3, std sqrt(2)/3 -> each success +0.707 from the fault alone
    assert group_advantages(rollout.rewards)[0, 0].item() > 0.7
    advantages = group_advantages(rollout.rewards, valid=rollout.valid)
    assert torch.equal(advantages, torch.zeros(1, 3))
