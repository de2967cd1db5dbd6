"""astrai's harness for verifiers environments (``env=verifiers``): verifiers' chat loop, run in
the trainer's process instead of as a program in a sandbox.

A verifiers 0.4.0 episode is a taskset's task played by a *harness*, the agent program, whose
model calls go through verifiers' interception server to the model's endpoint. Its own chat
harnesses (``null``, ``bash``) are a PEP 723 script that ``uv`` installs and runs in a runtime
(a sandbox by default) and that streams every completion; a trainer on a CPU has neither the
sandbox nor the time. verifiers' ``Harness.launch`` contract allows a loop in process as long
as every call goes through the interception ``endpoint`` with the rollout's ``secret``: this
is that loop, the one of verifiers' chat program (system prompt, the task's prompt or the
conversation a resumed segment carries, tool calls answered by the task's MCP tool servers
through verifiers' own MCP client, until a reply without tool calls), without streaming.

Each assistant message goes back in the next call exactly as the endpoint returned it (the
JSON, not the SDK's model of it): the endpoint refuses a history that differs from its trace.

verifiers finds a harness by a top-level module name (``harness.id``); ``env=verifiers``
registers this module as ``astrai_chat`` (``HARNESS_ID``).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from contextlib import AsyncExitStack
from typing import Any

import httpx
import verifiers.v1 as vf
from openai import AsyncOpenAI
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harnesses.utils.mcp import call_mcp, connect_mcp
from verifiers.v1.runtimes import ProgramResult

HARNESS_ID = "astrai_chat"

# one HTTP client per event loop (the loop of env=verifiers): a client made per call loads a CA
# bundle, ~20 ms, most of an episode's time; the interception server is plain HTTP on loopback
_http: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def _loop_http() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    if loop not in _http:
        # no connection limit: every live episode's call waits for the same lockstep turn, and
        # a pool of httpx's default 100 held the 101st call back forever (its turn never came)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        _http[loop] = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=30.0), limits=limits, trust_env=False
        )
    return _http[loop]


class AstraiChatConfig(vf.HarnessConfig):
    """``harness.id`` is ``astrai_chat``; ``tool_timeout`` (seconds) bounds one MCP tool call."""


class AstraiChatHarness(vf.Harness[AstraiChatConfig]):
    """verifiers' chat loop in process (module docstring)."""

    APPENDS_SYSTEM_PROMPT = True  # the task's system prompt opens the conversation
    SUPPORTS_MCP = True  # the task's tool servers answer its tool calls
    SUPPORTS_RESUME = True  # a multi-turn env's next segment: the loop on the conversation
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(  # type: ignore[override]
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:  # a conversation (a resumed segment): verifiers' messages as the wire's dicts
            messages += [message_to_wire(m) for m in prompt or []]
        client = AsyncOpenAI(
            base_url=endpoint, api_key=secret, max_retries=0, http_client=_loop_http()
        )
        servers = {n: {"url": u, "timeout": self.config.tool_timeout} for n, u in mcp_urls.items()}
        async with AsyncExitStack() as stack:
            tools, dispatch, connections = (
                await connect_mcp({"mcpServers": servers}, stack) if servers else ([], {}, {})
            )
            while True:
                extra = {"tools": tools} if tools else {}
                raw = await client.chat.completions.with_raw_response.create(
                    model=ctx.model,
                    messages=messages,  # type: ignore[arg-type]  # the endpoint's own JSON
                    **extra,
                )
                message = json.loads(raw.content)["choices"][0]["message"]
                messages.append(message)
                calls = message.get("tool_calls") or []
                if not calls:
                    return ProgramResult(0, message.get("content") or "", "")
                for call in calls:
                    content = await _answer(call, dispatch, connections)
                    messages.append(
                        {"role": "tool", "tool_call_id": call["id"], "content": content}
                    )


async def _answer(
    call: dict[str, Any], dispatch: dict[str, Any], connections: dict[str, Any]
) -> Any:
    """What a tool call gets back: its MCP tool's result, or an ``error: ...`` text the model
    reads (an unknown tool, arguments that are not a JSON object, a tool that failed), as
    verifiers' chat program answers them."""
    name = call["function"]["name"]
    try:
        arguments = json.loads(call["function"].get("arguments") or "{}")
    except json.JSONDecodeError as err:
        return f"error: invalid JSON in tool arguments ({err})"
    if not isinstance(arguments, dict):
        return f"error: tool arguments must be a JSON object, got {type(arguments).__name__}"
    if name not in dispatch:
        return f"error: unknown tool {name!r}"
    try:
        return await call_mcp(connections, dispatch, name, arguments)
    except Exception as err:  # noqa: BLE001 (a tool server's failure is the model's to read)
        return f"error: {type(err).__name__}: {err}"


__all__ = ["AstraiChatHarness"]
