"""Black-box agents (``env=agent``, issue 62): a user's function runs its own agent loop against
the endpoint, and the episode runner plays each of its model calls as a turn.

    def play(client, row):                  # sync: an openai.OpenAI; async def: AsyncOpenAI
                                            # (and env.agent_args as keyword arguments)
        messages = [{"role": "user", "content": row["text"]}]
        reply = client.chat.completions.create(model="astrai", messages=messages)
        ...                                 # tools, more calls: whatever the agent does
        return 1.0 if ... else 0.0          # the episode's reward (or {"reward", "metrics"})

``AgentEnvironment`` is an ``Environment``: its ``reset`` starts the function in a thread of its
own (an ``async def`` on an event loop of its own in that thread) with a client bound to this
process's endpoint (``endpoint.server``) under the episode's key, and returns the messages of its
first call; each ``step`` answers the pending call with the turn the runner sampled
(``endpoint.openai_format``: its ids and logprobs included) and returns the messages the next
call adds, or ends the episode when the function returns (its value is the final reward). So
the tokens are the native runner's, rendered the same way, within the same limits and
timeouts: an agent that plays a task as a native environment does gets the same ids, masks
and rewards.

Refused, never re-tokenised: a call whose history does not extend the previous call's history
plus the assistant message it was answered with (the agent edited or re-rendered it), a second
call while one is unanswered, or a first call whose ``tools`` are not ``env.tools`` fails the
episode as ``trace_break`` (``TraceBreak``: ``env/failed_trace_break``). A function that returns
without calling the model, or raises, fails it as ``raised``; one that hangs, as ``timeout``.
At ``max_turns`` (or the token budget) the call waiting is answered 410 (the episode is over)
and the function's return value is still its reward; if it raises then, the reward is 0.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import ssl
import threading
from collections.abc import Callable
from typing import Any

from astrai.endpoint.openai_format import assistant_message, chat_completion, first_difference
from astrai.endpoint.server import EXTRA, EndpointServer, endpoint_server
from astrai.endpoint.session import Call, Finished, Session, error_body
from astrai.endpoint.trace import TraceBreak
from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn
from astrai.imports import import_target

OVER = "this episode is over (env.max_turns or env.max_episode_tokens): no more calls"


class AgentError(RuntimeError):
    """The agent function broke the protocol: it returned without calling the model."""


def agent_function(agent: str | Callable[..., Any]) -> Callable[..., Any]:
    """``env.agent``: a function, or ``module.function``; ``ValueError`` naming the key."""
    if callable(agent):
        return agent
    if agent in (None, "???"):
        raise ValueError("env.agent is not set: name your agent, env.agent=module.function")
    found = import_target(agent, "env.agent")
    if not callable(found):
        raise ValueError(f"env.agent {agent!r} is not a function (client, row) -> reward")
    return found  # type: ignore[no-any-return]


def offered_tools(tools: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """``env.tools``: OpenAI function schemas, given as a list or ``module.attribute`` naming
    one (or a function returning one); none by default."""
    if tools is None:
        return []
    found = import_target(tools, "env.tools") if isinstance(tools, str) else tools
    found = found() if callable(found) else found
    if not isinstance(found, list) or not all(isinstance(t, dict) for t in found):
        raise ValueError(f"env.tools {tools!r} must be a list of OpenAI function schemas")
    return [dict(t) for t in found]


@functools.cache
def _openai() -> Any:
    """The ``openai`` module (the ``astrai[agent]`` extra)."""
    try:
        import openai
    except ImportError as err:
        raise ImportError(f"{EXTRA} ({err})") from None
    # httpx logs every request at INFO, which the run's logging shows: one line per turn (set
    # once: a logger's setLevel clears every logger's cache)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return openai


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every client of this process: an httpx client makes one of its own
    otherwise (CA bundle loaded), 25 ms each, most of an agent rollout's time on 2 cores. The
    endpoint is plain HTTP on loopback; the context is never used for it."""
    return ssl.create_default_context()


def _client(agent: Callable[..., Any], server: EndpointServer, key: str, wait_s: float) -> Any:
    """An ``openai`` client bound to ``server`` with the episode's ``key``: ``AsyncOpenAI``
    for an ``async def`` agent. No retries: a retried call would be a second call."""
    openai = _openai()
    # trust_env off: the endpoint is on loopback, never behind a proxy, and reading the proxy
    # variables from os.environ costs 2 ms a client (a client per episode)
    if inspect.iscoroutinefunction(agent):
        http: Any = openai.DefaultAsyncHttpxClient(verify=_ssl_context(), trust_env=False)
        kind: Any = openai.AsyncOpenAI
    else:
        http = openai.DefaultHttpxClient(verify=_ssl_context(), trust_env=False)
        kind = openai.OpenAI
    return kind(base_url=server.url, api_key=key, max_retries=0, timeout=wait_s, http_client=http)


def _incoming(call: Call, what: str) -> list[Message]:
    """The request's ``messages`` (a list of message dicts, contents ``None`` as empty)."""
    messages = call.body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        call.reply.set_result((400, error_body("messages must be a list of message objects")))
        raise AgentError(f"{what}: the request's messages are not a list of message objects")
    return [{**m, "content": "" if m.get("content") is None else m["content"]} for m in messages]


class EndpointEnvironment(Environment):
    """An episode played by something that calls the endpoint (module docstring): ``reset``
    opens a session and starts its player (``_start``, the subclass's), each model call is a
    turn. ``AgentEnvironment``'s player is a user's function, ``VerifiersEnvironment``'s a
    verifiers episode.

    Args:
        tools: the tools its calls offer the model (``offered_tools``): rendered into the
            opening as a native environment's are, and what its first call must send.
        model: the model name ``/v1/models`` lists.
        wait_s: how long one wait for the player may take at most (the episode's limits end it
            first; this only bounds a thread nobody waits for).
    """

    reads_tokens = True  # each answer carries the turn's ids and logprobs

    def __init__(
        self,
        tools: str | list[dict[str, Any]] | None = None,
        model: str = "astrai",
        wait_s: float = 600.0,
    ) -> None:
        self.offered = offered_tools(tools)
        self.model, self.wait_s = model, wait_s
        self.session: Session | None = None
        # the process's endpoint started here, not in reset: its first start costs seconds
        # (imports), within the constructor's time limit, once per process
        self.server = endpoint_server()

    def _start(self, session: Session, key: str, row: dict[str, Any]) -> None:
        """Start the episode's player on ``row``, its calls under ``key``; it ends ``session``
        with its return value (``_returned``) or its error."""
        raise NotImplementedError

    def tools(self) -> list[dict[str, Any]]:
        return self.offered

    def reset(self, row: dict[str, Any]) -> list[Message]:
        self.server.model = self.model
        self.session, key = self.server.open_session()
        self.turns, self.ended, self.outcome = 0, False, None
        self._start(self.session, key, row)
        event = self._next()
        if isinstance(event, Finished):
            self._close()
            if event.error is not None:
                raise event.error
            raise AgentError("the agent returned without calling the model")
        messages = _incoming(event, "the first call")
        sent = event.body.get("tools") or []
        if sent != self.offered:
            raise self._broken(
                event,
                400,
                "tools differ from env.tools",
                f"the first call offers {len(sent)} tools, not env.tools' {len(self.offered)}: "
                "the opening would not be what the model saw",
            )
        self.pending, self.history = event, messages
        return messages

    def step(self, turn: ParsedTurn) -> StepResult:
        self.turns += 1
        said = assistant_message(turn, f"call_{self.turns}")
        completion_id = f"chatcmpl-{self._session.sid}-{self.turns}"
        self.pending.reply.set_result((200, chat_completion(turn, said, self.model, completion_id)))
        event = self._next()
        if isinstance(event, Finished):
            self._close()
            if event.error is not None:
                raise event.error
            self.outcome, metrics, truncated = _returned(event.value)
            self.ended = True
            return StepResult(done=not truncated, truncated=truncated, metrics=metrics)
        messages = _incoming(event, f"call {self.turns + 1}")
        expected = [*self.history, said]
        at = first_difference(expected, messages)
        if at is not None:
            raise self._broken(
                event,
                409,
                "the history differs from the trace",
                f"call {self.turns + 1} does not extend the trace: its message {at} differs "
                "from what the episode holds (an edited or re-rendered history)",
            )
        self.pending, self.history = event, messages
        return StepResult(observations=messages[len(expected) :])

    def final_reward(self) -> Any:
        """The agent's return value (checked at the door: a finite number); at a limit, once
        its waiting call was refused (0 if it raises then)."""
        if self.ended:
            return self.outcome
        self._close()
        event = self._next()
        while isinstance(event, Call):  # a call that came before the session closed
            event.reply.set_result((410, error_body(OVER)))
            event = self._next()
        if event.error is not None:
            return 0.0  # it raised on the refused call: truncated, reward 0
        return _returned(event.value)[0]

    @property
    def _session(self) -> Session:
        assert self.session is not None, "reset() opens the session"
        return self.session

    def _next(self) -> Call | Finished:
        session = self._session
        event = session.next_event(self.wait_s)
        if session.broken is not None:
            self._close()
            raise TraceBreak(session.broken)
        return event

    def _broken(self, call: Call, status: int, answer: str, why: str) -> TraceBreak:
        """The trace broke at ``call``: it is answered ``status`` (``answer``) and the session
        closed; the ``TraceBreak`` (``why``) to raise."""
        call.reply.set_result((status, error_body(answer)))
        self._close()
        return TraceBreak(why)

    def _close(self) -> None:
        self.server.close_session(self._session, OVER)


class AgentEnvironment(EndpointEnvironment):
    """One episode of a user's agent function (module docstring).

    Args:
        agent: the function ``(client, row) -> reward`` (sync or ``async def``), or its
            ``module.function`` path.
        agent_args: keyword arguments the function is called with besides ``client`` and
            ``row`` (``env.agent_args``: the agent's own settings, composed by Hydra).
        tools, model, wait_s: ``EndpointEnvironment``'s.
    """

    def __init__(
        self,
        agent: str | Callable[..., Any],
        tools: str | list[dict[str, Any]] | None = None,
        model: str = "astrai",
        agent_args: dict[str, Any] | None = None,
        wait_s: float = 600.0,
    ) -> None:
        self.agent = agent_function(agent)
        self.agent_args = {str(k): v for k, v in (agent_args or {}).items()}
        try:  # refused here, at start-up, not in every episode
            inspect.signature(self.agent).bind(None, {}, **self.agent_args)
        except TypeError as err:
            raise ValueError(f"env.agent_args do not fit env.agent {agent}: {err}") from None
        super().__init__(tools, model, wait_s)
        _openai()  # imported here, not in reset: seconds, once per process

    def _start(self, session: Session, key: str, row: dict[str, Any]) -> None:
        """The agent function, in a thread of its own (an ``async def`` on an event loop of
        its own there), with a client under ``key``."""
        agent, kwargs = self.agent, self.agent_args
        client = _client(agent, self.server, key, self.wait_s)

        def run() -> None:
            try:
                if inspect.iscoroutinefunction(agent):
                    value = asyncio.run(_awaited(agent(client, dict(row), **kwargs), client))
                else:
                    with client:  # its connections closed when the agent returns
                        value = agent(client, dict(row), **kwargs)
                session.finish(value)
            except BaseException as err:  # noqa: BLE001 (user code: anything at all)
                session.finish(error=err)

        threading.Thread(target=run, name=f"astrai-agent-{session.sid}", daemon=True).start()


async def _awaited(value: Any, client: Any) -> Any:
    """An ``async def`` agent's result, its client closed on its loop after."""
    async with client:
        return await value


def _returned(value: Any) -> tuple[Any, dict[str, Any], bool]:
    """The player's return value as (reward, metrics, truncated): a number, or ``{"reward":
    ..., "metrics": {...}, "truncated": ...}`` (the runner checks reward and metrics at the
    door; truncated: it stopped at a limit of its own, verifiers' ``max_turns``, so the episode
    is out of turns rather than done)."""
    if isinstance(value, dict) and "reward" in value:
        return value["reward"], dict(value.get("metrics") or {}), bool(value.get("truncated"))
    return value, {}, False
