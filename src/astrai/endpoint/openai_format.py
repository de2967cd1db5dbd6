"""A sampled turn as an OpenAI chat completion, and chat messages compared as a trace needs.

The completion follows vLLM's server, so a client written for vLLM reads it: the message (its
``content`` and ``tool_calls``, parsed by the run's ``env.parser``), ``logprobs.content`` with
one entry per sampled token whose ``token`` is ``token_id:<id>`` (vLLM's
``return_tokens_as_token_ids``), ``choices[0].token_ids`` and ``prompt_token_ids`` (vLLM's
``return_token_ids``), ``usage``; ``system_fingerprint`` names the chat template's hash and the
policy version. A turn whose tool calls could not be read answers with its whole text as
``content`` and no ``tool_calls`` (as vLLM does when its tool parser fails).
"""

from __future__ import annotations

import json
import time
from typing import Any

from astrai.envs.tool_calls import ParsedTurn, SampledTurn, ToolCall


def tool_call_json(call: ToolCall, call_id: str) -> dict[str, Any]:
    """One call as OpenAI writes it (``arguments`` a JSON string)."""
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def assistant_message(turn: ParsedTurn, call_prefix: str) -> dict[str, Any]:
    """The turn as the assistant message a client gets (and must send back unchanged)."""
    if turn.errors:
        text = turn.sampled.text if turn.sampled is not None else turn.content
        return {"role": "assistant", "content": text.strip()}
    if not turn.calls:
        return {"role": "assistant", "content": turn.content}
    calls = [tool_call_json(call, f"{call_prefix}_{k}") for k, call in enumerate(turn.calls)]
    return {"role": "assistant", "content": turn.content or None, "tool_calls": calls}


def finish_reason(turn: ParsedTurn) -> str:
    """``tool_calls``, ``stop`` or ``length`` (cut at ``max_new_tokens`` or the episode's
    token budget)."""
    if turn.calls and not turn.errors:
        return "tool_calls"
    return "stop" if turn.sampled is None or turn.sampled.stopped else "length"


def chat_completion(
    turn: ParsedTurn, message: dict[str, Any], model: str, completion_id: str
) -> dict[str, Any]:
    """The JSON body answering a chat completion request with ``turn`` (its ``message``)."""
    sampled = turn.sampled or SampledTurn([], [], [], -1, turn.content, True)
    logprobs: list[dict[str, Any]] = [
        {"token": f"token_id:{i}", "logprob": p, "bytes": None, "top_logprobs": []}
        for i, p in zip(sampled.token_ids, sampled.logprobs, strict=True)
    ]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": {"content": logprobs},
        "finish_reason": finish_reason(turn),
        "token_ids": sampled.token_ids,
    }
    prompt, completion = len(sampled.prompt_ids), len(sampled.token_ids)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": f"astrai-{sampled.template}-v{sampled.version}",
        "choices": [choice],
        "prompt_token_ids": sampled.prompt_ids,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _content(value: Any) -> str:
    """A message's content as text: None is empty, a list of parts their texts joined."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "".join(str(p.get("text", "")) for p in value if isinstance(p, dict))
    return str(value)


def _calls(value: Any) -> list[tuple[Any, Any]]:
    """A message's tool calls as ``(name, arguments)``: ids and JSON spacing do not count."""
    calls = []
    for call in value or []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        arguments = function.get("arguments", "{}")
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            pass  # compared as the text it is
        calls.append((function.get("name"), arguments))
    return calls


def same_message(a: Any, b: Any) -> bool:
    """Whether two chat messages say the same: role, content (``None`` as empty, parts
    joined) and tool calls (name and arguments; ids ignored). Other keys do not count."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    return (
        a.get("role") == b.get("role")
        and _content(a.get("content")) == _content(b.get("content"))
        and _calls(a.get("tool_calls")) == _calls(b.get("tool_calls"))
    )


def first_difference(history: list[dict[str, Any]], messages: list[Any]) -> int | None:
    """The first index at which ``messages`` does not start with ``history`` (None: it does)."""
    for k, said in enumerate(history):
        if k >= len(messages) or not same_message(said, messages[k]):
            return k
    return None
