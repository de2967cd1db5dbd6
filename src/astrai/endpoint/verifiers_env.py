"""verifiers environments (``env=verifiers``, issue 62): a verifiers 0.4.0 taskset (its tasks'
rewards and metrics, its tool servers, its own ``Env`` with a multi-turn ``run``) played
against the endpoint, each of its model calls a turn of the native episode runner.

    python train.py env=verifiers env.taskset=my_taskset task=dataset ...   # by module name

``VerifiersEnvironment`` is an ``EndpointEnvironment`` (as ``AgentEnvironment``) whose player
is a verifiers episode rather than a user's function: ``reset`` builds the verifiers task from
the run's task row (the ``prompt``, and the ``answer`` where its ``TaskData`` has one) and starts
``Env.run_episode`` on this process's verifiers event loop (``_loop``), with the model context
bound to the endpoint (the process's token, the model named ``<model>@<session>``). verifiers'
interception server sits between its harness and the endpoint and forwards the calls; the
harness is astrai's in-process chat loop (``endpoint.verifiers_harness``) unless ``env.harness``
names another. The episode's reward is
its trace's (the weighted sum of its rubric's rewards), its metrics the trace's; a trace that
is not ``ok`` (a reward function or the env's ``run`` raised, a model call was refused) fails
the episode with verifiers' error.

Everything else is the agent adapter's: the ids, masks and logprobs the runner sampled, the
limits and failure causes, a history that does not extend the trace refused as ``trace_break``.
verifiers' own ``max_turns`` is ``env.max_turns`` (``verifiers_max_turns``), so that it ends and
scores an episode at the limit; at the token budget the endpoint refuses the waiting call and
the reward is 0.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import sys
import threading
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

from astrai.endpoint.agent import EndpointEnvironment
from astrai.endpoint.session import Session

EXTRA = "env=verifiers needs verifiers: pip install 'astrai[verifiers]'"
TOKEN_VAR = "ASTRAI_ENDPOINT_TOKEN"  # verifiers reads its client's key from the environment
LIMITS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens")
START_TIMEOUT_S = 120.0  # loading a taskset and starting its interception server


class VerifiersError(RuntimeError):
    """A verifiers episode that did not end ``ok``: its first error, as verifiers recorded it."""


@functools.cache
def _verifiers() -> Any:
    """``verifiers.v1``, with astrai's harness registered as ``astrai_chat``."""
    try:
        import verifiers.v1 as vf
    except ImportError as err:
        raise ImportError(f"{EXTRA} ({err})") from None
    from astrai.endpoint import verifiers_harness

    # verifiers logs each rollout's start and end at INFO, and aiohttp (its interception server)
    # each request: the run's log would hold several lines a turn
    for name in ("verifiers.v1", "aiohttp.access"):
        logging.getLogger(name).setLevel(logging.WARNING)

    sys.modules.setdefault(verifiers_harness.HARNESS_ID, verifiers_harness)
    return vf


@functools.cache
def _loop() -> asyncio.AbstractEventLoop:
    """This process's verifiers event loop, in a daemon thread: every verifiers environment of
    the process is served on it (interception server, shared tool servers) and plays its
    episodes there."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="astrai-verifiers", daemon=True).start()
    return loop


_served: dict[str, Any] = {}
_served_lock = threading.Lock()
_stack = AsyncExitStack()  # the served environments' ``serving()``, open while the process lives


def _served_env(config: dict[str, Any]) -> Any:
    """The verifiers ``Env`` of ``config``, loaded and serving, once per process."""
    key = json.dumps(config, sort_keys=True, default=str)
    with _served_lock:
        if key not in _served:
            vf = _verifiers()
            env = vf.load_environment(vf.resolve_env_config(config))

            async def serve() -> None:
                await _stack.enter_async_context(env.serving())

            asyncio.run_coroutine_threadsafe(serve(), _loop()).result(START_TIMEOUT_S)
            _served[key] = env
        return _served[key]


_tools: dict[int, list[dict[str, Any]]] = {}


def _listed_tools(env: Any, task_type: Any) -> list[dict[str, Any]]:
    """The tools a task of ``env`` offers: its toolsets served once (a subprocess each, seconds)
    and listed through verifiers' MCP client, as ``astrai_chat`` lists them in each episode; the
    taskset's shared servers' too. Once per served environment."""
    with _served_lock:
        if id(env) in _tools:
            return _tools[id(env)]
    from verifiers.v1.harnesses.utils.mcp import connect_mcp
    from verifiers.v1.mcp import serve

    toolsets = task_type.toolsets(env.taskset.config.task)

    async def listed() -> list[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            urls = {name: shared.url for name, shared in env._shared_tools.items()}
            for toolset in toolsets:
                urls[toolset.server_name] = await stack.enter_async_context(serve(toolset))
            servers = {name: {"url": url} for name, url in urls.items()}
            tools, _, _ = await connect_mcp({"mcpServers": servers}, stack)
            return tools

    found = asyncio.run_coroutine_threadsafe(listed(), _loop()).result(START_TIMEOUT_S)
    with _served_lock:
        _tools[id(env)] = found
    return found


class VerifiersEnvironment(EndpointEnvironment):
    """One episode of a verifiers taskset (module docstring).

    Args:
        taskset: the taskset's id, a module name verifiers imports (``my_taskset``;
            ``owner/name`` hub ids as verifiers reads them).
        taskset_args: the taskset's own config fields (``TasksetConfig``).
        env_id: a verifiers ``Env`` to pair with the taskset; empty: the taskset's own
            (its module's ``Env`` subclass), else verifiers' single-agent env.
        harness: the harness id; ``astrai_chat`` (verifiers' chat loop in process) by default.
        verifiers_max_turns: verifiers' own model-call limit (``env.max_turns``).
        tools: as ``EndpointEnvironment``'s; None (the default): what the taskset's tool
            servers offer (``_listed_tools``).
        model, wait_s: ``EndpointEnvironment``'s.
    """

    def __init__(
        self,
        taskset: str,
        taskset_args: dict[str, Any] | None = None,
        env_id: str = "",
        harness: str = "astrai_chat",
        verifiers_max_turns: int | None = None,
        tools: str | list[dict[str, Any]] | None = None,
        model: str = "astrai",
        wait_s: float = 600.0,
    ) -> None:
        if not taskset or taskset == "???":
            raise ValueError("env.taskset is not set: name a verifiers taskset, env.taskset=module")
        vf = _verifiers()
        super().__init__(tools, model, wait_s)
        config = {
            "id": env_id,
            "taskset": {"id": taskset, **(taskset_args or {})},
            # subprocess: nothing remote (verifiers' default runtime is a hosted sandbox)
            "agent": {"harness": {"id": harness}, "runtime": {"type": "subprocess"},
                      "max_turns": verifiers_max_turns},
            "interception": {"type": "server"},
        }  # fmt: skip
        try:
            self.venv = _served_env(config)
        except (ImportError, ValueError, TypeError, AttributeError) as err:
            raise ValueError(f"env.taskset {taskset!r}: {err}") from None
        self.task_type = self.venv._task_cls
        self.data_type = self.task_type.data_type()
        missing = [
            name
            for name, field in self.data_type.model_fields.items()
            if field.is_required() and name not in ("prompt", "answer")
        ]
        if missing:
            raise ValueError(
                f"env.taskset {taskset!r}: its {self.data_type.__name__} needs {missing}, "
                "which a task row does not carry (a row gives prompt and answer)"
            )
        if tools is None:  # what the taskset's tool servers offer, as its harness lists them
            self.offered = _listed_tools(self.venv, self.task_type)
        # the client verifiers builds reads its key from the environment: this process's token,
        # the same for every episode (each names its session in its model: ``_start``)
        os.environ[TOKEN_VAR] = self.server.token
        client = vf.EvalClientConfig(base_url=self.server.url, api_key_var=TOKEN_VAR)
        self.context = functools.partial(
            vf.ModelContext, client=client, sampling=vf.SamplingConfig()
        )

    def _task(self, row: Mapping[str, Any]) -> Any:
        """The verifiers task of a task row: its ``prompt``, and ``answer`` where the task's
        data has that field."""
        values = {"prompt": row["prompt"]}
        if "answer" in self.data_type.model_fields and row.get("answer") is not None:
            values["answer"] = row["answer"]
        return self.task_type(self.data_type.model_validate(values), self.venv.taskset.config.task)

    def _start(self, session: Session, key: str, row: dict[str, Any]) -> None:
        # one client config for every episode (verifiers keeps a client per config: one per
        # episode cost a TLS context, 25 ms, and never went away); the session is the model's
        # name, which verifiers sends with each call as the context names it
        ctx = self.context(model=f"{self.model}@{session.sid}")
        future = asyncio.run_coroutine_threadsafe(_played(self.venv, self._task(row), ctx), _loop())

        def finished(done: Any) -> None:
            try:
                session.finish(done.result())
            except BaseException as err:  # noqa: BLE001 (the episode's failure, whatever it is)
                session.finish(error=err)

        future.add_done_callback(finished)


async def _played(env: Any, task: Any, ctx: Any) -> dict[str, Any]:
    """One verifiers episode: its trace's reward and numeric metrics; ``VerifiersError`` with
    verifiers' first error where it did not end ``ok``."""
    episode = await env.run_episode(task, ctx)
    errors = [*episode.errors, *(e for trace in episode.traces for e in trace.errors)]
    if errors or not episode.ok:
        first = errors[0] if errors else None
        why = f"{first.type}: {first.message}" if first else "the episode did not end ok"
        raise VerifiersError(f"verifiers episode failed: {why}")
    if len(episode.traces) != 1:
        raise VerifiersError(f"a verifiers episode of {len(episode.traces)} agent runs: one only")
    (trace,) = episode.traces
    metrics = {
        name: float(value)
        for name, value in trace.metrics.items()
        if isinstance(value, int | float) and math.isfinite(value)
    }
    # stopped by a limit of verifiers' own (max_turns): out of turns, as the native runner's
    truncated = trace.stop_condition in LIMITS
    return {"reward": trace.reward, "metrics": metrics, "truncated": truncated}
