"""The embedded calculator task (``experiment=calculator``) played by a black-box agent: a
function that talks to astrai's OpenAI-compatible endpoint with the ``openai`` SDK, runs the
``multiply`` tool itself and returns the reward. It plays the task exactly as the native
environment (``astrai.envs.calculator.Calculator``) does, so the two give the same tokens, masks
and rewards (tests/endpoint/test_conformance.py):

    PYTHONPATH=examples/agent python train.py experiment=calculator_agent

A call is a turn the model types as ``c`` (``multiply`` with the question's numbers) or
``c12*34``; the reply is ``=<product>`` (``e`` for a malformed call). The first call earns up to
``call_reward`` (its characters' match with ``c``), the answer the share of its characters that
match the product. At a limit (``env.max_turns``) the endpoint answers the waiting call 410:
the episode is over, and what the calls earned is its reward.
"""

from __future__ import annotations

import json
import re
from typing import Any

import openai

from astrai.tasks.rewards import positional_match_reward

QUESTION = re.compile(r"^(-?\d+)\*(-?\d+)=?\??$")


def _product(call: Any, a: int, b: int) -> str:
    """The reply to one tool call: ``=<product>``, or ``e`` for one it cannot run."""
    arguments = json.loads(call.function.arguments or "{}")
    if call.function.name != "multiply" or not all(
        isinstance(arguments.get(k, 0), int) for k in ("a", "b")
    ):
        return "e"
    return f"={arguments.get('a', a) * arguments.get('b', b)}"


def _typed(message: Any) -> str:
    """The call as the model typed it: a malformed call's text, else ``c`` or ``c12*34``."""
    if not message.tool_calls:
        return message.content or ""
    arguments = json.loads(message.tool_calls[0].function.arguments or "{}")
    return f"c{arguments.get('a')}*{arguments.get('b')}" if arguments else "c"


def play(client: openai.OpenAI, row: dict[str, Any], call_reward: float = 0.5) -> Any:
    """One episode of ``row`` (a ``task=products`` row: ``text`` is ``"12*34="``);
    ``call_reward`` (``env.agent_args.call_reward``) as the native ``env.call_reward``."""
    match = QUESTION.match(row["text"])
    assert match is not None, row["text"]
    a, b = int(match.group(1)), int(match.group(2))
    messages: list[dict[str, Any]] = [{"role": "user", "content": row["text"]}]
    credit, calls = 0.0, 0
    try:
        while True:
            reply = client.chat.completions.create(model="astrai", messages=messages)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            content = message.content or ""
            if not message.tool_calls and not content.startswith("c"):  # the answer
                score = positional_match_reward(content, str(a * b))
                # solved: the product itself (what eval/accuracy counts, as the native env's)
                return {"reward": credit + score, "metrics": {"solved": float(score == 1.0)}}
            calls += 1
            if calls == 1:  # the first call's credit: its text's match with "c"
                credit += call_reward * positional_match_reward(_typed(message), "c")
            replies = [_product(call, a, b) for call in message.tool_calls or []] or ["e"]
            messages += [{"role": "tool", "content": text} for text in replies]
    except openai.APIStatusError as err:
        if err.status_code != 410:  # 410: the episode ended at a limit
            raise
        return credit
