"""Agent functions for the endpoint's tests (``tests/endpoint``): importable by path (``env.agent``,
a worker process), each one a way a black-box agent behaves or misbehaves."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai

TRACE: dict[str, list[dict[str, Any]]] = {}  # each recording agent's completions, by its row's text


def _ask(client: openai.OpenAI, messages: list[dict[str, Any]]) -> Any:
    return client.chat.completions.create(model="astrai", messages=messages)


def records(client: openai.OpenAI, row: dict[str, Any]) -> float:
    """Two calls (the second after a user turn), each completion kept whole in ``TRACE``."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": row["text"]}]
    kept = TRACE.setdefault(row["text"], [])
    for _ in range(2):
        reply = _ask(client, messages)
        kept.append(reply.model_dump())
        messages += [reply.choices[0].message.model_dump(exclude_none=True),
                     {"role": "user", "content": "again"}]  # fmt: skip
    return float(len(reply.choices[0].message.content or ""))


def edits_history(client: openai.OpenAI, row: dict[str, Any]) -> float:
    """Its second call sends the first answer back changed: the trace breaks."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": row["text"]}]
    reply = _ask(client, messages)
    said = reply.choices[0].message.content or ""
    messages += [{"role": "assistant", "content": said + " (edited)"},
                 {"role": "user", "content": "again"}]  # fmt: skip
    _ask(client, messages)
    return 1.0


def never_calls(client: openai.OpenAI, row: dict[str, Any]) -> float:
    return 1.0


def hangs(client: openai.OpenAI, row: dict[str, Any]) -> float:
    time.sleep(30)
    return 1.0


def raises_after_a_call(client: openai.OpenAI, row: dict[str, Any]) -> float:
    _ask(client, [{"role": "user", "content": row["text"]}])
    raise RuntimeError("the agent's own bug")


def wrong_tools(client: openai.OpenAI, row: dict[str, Any]) -> float:
    tools = [{"type": "function", "function": {"name": "other", "parameters": {}}}]
    client.chat.completions.create(
        model="astrai", messages=[{"role": "user", "content": row["text"]}], tools=tools
    )
    return 1.0


async def two_at_once(client: openai.AsyncOpenAI, row: dict[str, Any]) -> float:
    """Two calls in flight together: one episode is one conversation, so the trace breaks."""
    messages = [{"role": "user", "content": row["text"]}]
    ask = lambda: client.chat.completions.create(model="astrai", messages=messages)  # noqa: E731
    await asyncio.gather(ask(), ask())
    return 1.0


async def answers_async(client: openai.AsyncOpenAI, row: dict[str, Any]) -> dict[str, Any]:
    """An ``async def`` agent: one call, its reward and a metric of its own."""
    reply = await client.chat.completions.create(
        model="astrai", messages=[{"role": "user", "content": row["text"]}]
    )
    content = reply.choices[0].message.content or ""
    return {"reward": float(content == "ok"), "metrics": {"chars": float(len(content))}}


LOOKUP_TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "The code of a word.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}},
                   "required": ["word"]}}}]  # fmt: skip
FOLLOW_UP = "Only the number, please."


def looks_up(client: openai.OpenAI, row: dict[str, Any], rerender: bool = False) -> float:
    """Three calls of a chat model with Hermes tool calls: the call, its reply, the answer, a
    user's follow-up, the answer again; each completion kept in ``TRACE``. ``rerender``: the
    assistant's call is sent back as text in its content, as a harness rendering its own
    history would (not the tool_calls it was answered with)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": row["text"]}]
    kept = TRACE.setdefault(row["text"], [])
    reply = client.chat.completions.create(model="astrai", messages=messages, tools=LOOKUP_TOOLS)
    kept.append(reply.model_dump())
    said = reply.choices[0].message
    calls = said.tool_calls or []
    sent = said.model_dump(exclude_none=True)
    if rerender:
        text = "".join(f"<tool_call>{c.function.arguments}</tool_call>" for c in calls)
        sent = {"role": "assistant", "content": text}
    messages += [sent, *({"role": "tool", "content": "=47", "tool_call_id": c.id} for c in calls)]
    for follow_up in ([], [{"role": "user", "content": FOLLOW_UP}]):
        reply = client.chat.completions.create(model="astrai", messages=messages + follow_up)
        kept.append(reply.model_dump())
        messages += [*follow_up, reply.choices[0].message.model_dump(exclude_none=True)]
    return float("47" in (reply.choices[0].message.content or ""))
