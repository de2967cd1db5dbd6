"""A real chat model's episode through the endpoint (issue 62's acceptance): SmolLM2-135M-Instruct's
tokenizer and ChatML template (``make smollm2``), Hermes tool calls, three calls of an agent
(``tests/endpoint_agents.looks_up``: the call, its reply, the answer, a user's follow-up, the
answer again). The turns are scripted ids (each text's own tokenisation), so every id is known:

- each call's ``prompt_token_ids`` are the template's rendering of the conversation the agent
  sent (the tools in the system message as the native runner writes them), and the client's
  record of its calls (``endpoint.trace.assemble``) is the episode's tokens: the rendering of the
  whole conversation, token for token, its trainable tokens exactly the sampled ones;
- an agent that sends its tool call back as text (re-rendering its history) is refused as
  ``trace_break`` and counted in ``env/failed_trace_break``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests import endpoint_agents
from tests.scripted_engine import ScriptedIds

from astrai.checkpoints.policy import read_tokenizer_and_config
from astrai.endpoint.trace import assemble, traced_call
from astrai.models.hf_tokenizer import HFTokenizer
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.episodes.env_spec import env_spec
from astrai.rollout.episodes.rollout import episode_stats, play_episodes
from astrai.rollout.episodes.tool_prompt import with_tool_system
from astrai.tasks.base import Problem

CALL = '<tool_call>\n{"name": "lookup", "arguments": {"word": "kiwi"}}\n</tool_call>'
SAID, AGAIN = "The code of kiwi is 47.", "47"


def _episode(tokenizer: HFTokenizer, question: str, rerender: bool):  # noqa: ANN202
    spec = env_spec({"_target_": "astrai.endpoint.agent.AgentEnvironment", "parser": "hermes",
                     "agent": "tests.endpoint_agents.looks_up",
                     "tools": "tests.endpoint_agents.LOOKUP_TOOLS", "max_turns": 3,
                     "workers": "thread", "agent_args": {"rerender": rerender}})  # fmt: skip
    assert spec is not None
    end = tokenizer.encode("<|im_end|>", False)
    script = [[tokenizer.encode(CALL, False)], [tokenizer.encode(SAID, False) + end],
              [tokenizer.encode(AGAIN, False) + end]]  # fmt: skip
    engine = ScriptedIds(tokenizer, script)
    problem = Problem(prompt=question, answer="47", text=question)
    sampling = SamplingConfig(max_new_tokens=64, temperature=1.0)
    (episode,) = play_episodes(engine, tokenizer, spec, [problem], 1, sampling, 2048, None, 5,
                               torch.device("cpu"))  # fmt: skip
    return episode, endpoint_agents.TRACE.pop(question)


@pytest.mark.slow  # SmolLM2's tokenizer: the converted model directory (make smollm2)
def test_a_three_call_episode_is_the_template_s_rendering_and_a_rerender_is_refused(
    smollm2: Path,
) -> None:
    tokenizer, _ = read_tokenizer_and_config(smollm2)
    assert isinstance(tokenizer, HFTokenizer)
    question = "What is the code of kiwi?"
    episode, completions = _episode(tokenizer, question, rerender=False)
    assert not episode.failed and episode.done and len(completions) == 3, episode.error
    assert episode.final_reward == 1.0 and max(episode.tokens.turns) == 3
    # the conversation as the agent holds it, with the tools written into the system message
    tools = endpoint_agents.LOOKUP_TOOLS
    call = completions[0]["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"word": "kiwi"}
    said = [CALL, SAID, AGAIN]
    conversation = with_tool_system([{"role": "user", "content": question}], tools, "hermes")
    follow_up = {"role": "user", "content": endpoint_agents.FOLLOW_UP}
    replies = [[{"role": "tool", "content": "=47"}], [follow_up], []]
    for k, completion in enumerate(completions):
        rendered = tokenizer.render_messages(conversation, True)
        assert completion["prompt_token_ids"] == tokenizer.encode(rendered, False), k
        conversation = [*conversation, {"role": "assistant", "content": said[k]}, *replies[k]]
    ledger = assemble([traced_call(c) for c in completions])
    assert vars(ledger) == vars(episode.tokens)
    whole = tokenizer.encode(tokenizer.render_messages(conversation, False), False)
    assert episode.tokens.ids == whole[: len(episode.tokens.ids)]
    assert whole[len(episode.tokens.ids) :] == tokenizer.encode("\n", False)  # ChatML separator
    sampled = [i for i, t in zip(episode.tokens.ids, episode.tokens.trainable, strict=True) if t]
    assert sampled == [i for k in range(3) for i in completions[k]["choices"][0]["token_ids"]]

    refused, _ = _episode(tokenizer, question, rerender=True)
    assert refused.failed and refused.cause == "trace_break"
    assert episode_stats(refused, 1.0)["failed_trace_break"] == 1.0
