"""``rollout.episodes.rollout``: episodes laid out as a ``Rollout`` the strategies read (the
opening as the prompt, the sampled tokens as the actions, rewards on their turns' last tokens,
a failed episode out of the loss), through the plain-text rendering of the tiny model."""

from __future__ import annotations

import torch
from tests.scripted_engine import GREEDY, TOKENIZER, Scripted

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn
from astrai.rollout.episodes.env_spec import env_spec
from astrai.rollout.episodes.rollout import episodes_rollout, play_episodes, split_opening
from astrai.rollout.rollout import cat_rollouts
from astrai.tasks.arithmetic import ProductTask

CALCULATOR = {"_target_": "astrai.envs.calculator.Calculator", "parser": "calc_line"}


def _ids(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_bos=False)


def test_a_group_of_episodes_becomes_prompt_actions_and_turn_rewards() -> None:
    spec = env_spec(CALCULATOR)
    assert spec is not None
    (problem,) = ProductTask().train_problems(0, 0, 1)
    a, b = ProductTask().operands(problem.text)
    product = str(a * b)
    # episode 0 calls the tool then answers right; episode 1 answers at once, wrongly
    engine = Scripted([["c", "1"], [product]])
    episodes = play_episodes(
        engine, TOKENIZER, spec, [problem], 2, GREEDY, 64, None, 3, torch.device("cpu")
    )
    rollout = episodes_rollout(episodes, [problem], TOKENIZER.pad_id, TOKENIZER.decode, 3, 1.0)
    opening = TOKENIZER.encode(problem.text)  # BOS + "12*34="
    assert rollout.prompt_ids[0][rollout.prompt_mask[0]].tolist() == opening
    call, reply, answer = _ids("c") + [2], _ids(f"={product}"), _ids(product) + [2]
    first = rollout.response_ids[0, 0][rollout.response_mask[0, 0]].tolist()
    assert first == call + reply + answer
    # the actions are exactly the sampled tokens: the tool's reply is context
    sampled = [True] * len(call) + [False] * len(reply) + [True] * len(answer)
    assert rollout.sampled_mask[0, 0][rollout.response_mask[0, 0]].tolist() == sampled
    assert torch.equal(rollout.loss_mask, rollout.sampled_mask)
    # the call's full credit (0.5) on its stop token, the answer's 1.0 on the last
    scores = rollout.token_scores[0, 0]
    assert scores[len(call) - 1].item() == 0.5 and scores[len(first) - 1].item() == 1.0
    assert scores.sum().item() == 1.5 and rollout.rewards[0].tolist() == [1.5, 1.0 / 4]
    assert rollout.episode_stats["solved"][0].tolist() == [1.0, 0.0]
    assert rollout.episode_stats["turns"][0].tolist() == [2.0, 1.0]
    assert rollout.episode_stats["tool_calls"][0].tolist() == [1.0, 0.0]
    assert rollout.sample_versions.tolist() == [[3, 3]]
    # behaviour logprobs where sampled (the scripted engine's -0.5), 0 on the reply
    assert rollout.logprobs[0, 0][: len(first)].tolist() == [-0.5 if s else 0.0 for s in sampled]


class Opens(Environment):
    """Opens with what its row says, fails its step when the row says so."""

    count = 0

    def reset(self, row: dict) -> list[Message]:
        Opens.count += 1
        suffix = Opens.count % 2 if row["odd"] else ""
        return [{"role": "user", "content": f"{row['text']}{suffix}"}]

    def step(self, turn: ParsedTurn) -> StepResult:
        if turn.content == "9":
            raise RuntimeError("boom")
        return StepResult(reward=1.0, done=True)


def test_a_failed_episode_and_a_group_opened_differently_leave_the_loss(monkeypatch) -> None:  # noqa: ANN001
    # threads: ``Opens.count`` is this process's (each worker process would count its own)
    spec = env_spec({"_target_": f"{__name__}.Opens", "workers": "thread"})
    assert spec is not None
    monkeypatch.setattr(
        "astrai.rollout.episodes.rollout.task_row", lambda p: {"text": p.text, "odd": False}
    )
    problems = ProductTask().train_problems(0, 0, 1)
    episodes = play_episodes(
        Scripted([["1", "9"]]), TOKENIZER, spec, problems, 2, GREEDY, 64, None, 0, "cpu"
    )
    rollout = episodes_rollout(episodes, problems, TOKENIZER.pad_id, TOKENIZER.decode, 0, 1.0)
    assert rollout.rewards.tolist() == [[1.0, 0.0]]
    assert rollout.loss_mask[0, 1].sum() == 0 and rollout.sampled_mask[0, 1].sum() == 2
    assert rollout.loss_mask[0, 0].sum() == 2
    assert rollout.episode_stats["failed"].tolist() == [[0.0, 1.0]]
    monkeypatch.setattr(
        "astrai.rollout.episodes.rollout.task_row", lambda p: {"text": p.text, "odd": True}
    )
    episodes = play_episodes(
        Scripted([["1", "1"]]), TOKENIZER, spec, problems, 2, GREEDY, 64, None, 0, "cpu"
    )
    # a group opened differently fails, with a warning; the run goes on (issue 58)
    rollout = episodes_rollout(episodes, problems, TOKENIZER.pad_id, TOKENIZER.decode, 0, 1.0)
    assert [e.cause for e in episodes] == ["opening", "opening"]
    assert rollout.loss_mask[0].sum() == 0 and rollout.rewards.tolist() == [[0.0, 0.0]]


def test_each_token_keeps_the_policy_version_that_sampled_it() -> None:
    """Issue 60: per-token policy versions survive into the ``Rollout`` (an episode whose turns
    were sampled across a weight update keeps each turn's), -1 on the observations and the
    padding; ``cat_rollouts`` pads them with -1."""
    spec = env_spec(CALCULATOR)
    assert spec is not None
    (problem,) = ProductTask().train_problems(0, 0, 1)
    a, b = ProductTask().operands(problem.text)
    engine = Scripted([["c", "1"], [str(a * b)]])
    episodes = play_episodes(
        engine, TOKENIZER, spec, [problem], 2, GREEDY, 64, None, 3, torch.device("cpu")
    )
    call, reply = len(_ids("c")) + 1, len(_ids(f"={a * b}"))
    tokens, (opening, _) = episodes[0].tokens, split_opening(episodes[0])
    # the answer turn sampled after one update (what a partial rollout records)
    answer_start = len(opening) + call + reply
    tokens.versions[answer_start:] = [4] * (len(tokens.ids) - answer_start)
    rollout = episodes_rollout(episodes, [problem], TOKENIZER.pad_id, TOKENIZER.decode, 3, 1.0)
    assert rollout.token_versions is not None
    size = int(rollout.response_mask[0, 0].sum())
    answer = size - call - reply
    assert rollout.token_versions[0, 0, :size].tolist() == [3] * call + [-1] * reply + [4] * answer
    assert (rollout.token_versions[0, 0, size:] == -1).all()
    assert (rollout.token_versions == -1).eq(~rollout.sampled_mask).all()  # -1: not sampled
    joined = cat_rollouts([rollout, rollout.select(slice(0, 1))], TOKENIZER.pad_id)
    assert torch.equal(joined.token_versions[0], rollout.token_versions[0])
