"""OpenEnv environments (``env=openenv``, issue 62): an environment built on ``openenv-core``'s
server classes, served on 127.0.0.1 by OpenEnv's own server (uvicorn), reached through OpenEnv's
client, played by the native episode runner.

    python train.py env=openenv env.app=my_env.server:app task=dataset ...   # astrai serves it
    python train.py env=openenv env.url=http://127.0.0.1:8000 ...             # already served

``OpenEnvEnvironment`` is an ``Environment``. ``reset`` starts an episode on a session
(OpenEnv's websocket: one environment instance per connection) with the task row's
``reset_args`` (``prompt`` by default) as keyword arguments, and returns the observation's
``text_key`` field as the opening message. ``step`` maps a turn to OpenEnv's actions: each tool
call to a ``CallToolAction`` (an MCP environment, ``env.mcp=true``: the tools are what its
``ListToolsAction`` lists; a turn without a call ends its episode, as a chat loop ends),
otherwise the turn's text as the ``action_key`` field of the environment's action. The
observation comes back as a message of ``observation_role``, its ``reward`` as the turn's
(``None``: no reward, 0), and ``done`` ends the episode. Tokens, masks, limits and failure
causes are the native runner's.

Sessions are pooled (``Sessions``): an episode borrows an open one at ``reset`` and gives it back
when it is over, so the server holds about as many sessions as episodes run at once. A session
that fails (the server died, a reply past ``env.step_timeout_s``) fails its episode and is
closed; the next episode connects again, and a server astrai started (``env.app``) that has
exited is started again first.
"""

from __future__ import annotations

import atexit
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn

EXTRA = "env=openenv needs openenv-core: see docs/environments.md (pip install --no-deps)"
START_TIMEOUT_S = 60.0


def _client_class() -> Any:
    try:
        from openenv.core import GenericEnvClient
    except ImportError as err:
        raise ImportError(f"{EXTRA} ({err})") from None
    return GenericEnvClient


class OpenEnvServer:
    """OpenEnv's server for ``app`` (``module:attribute``, an app from ``create_fastapi_app``)
    in a ``uvicorn`` process of its own on 127.0.0.1 (``envs.openenv_serve``: it ends with this
    process), started again if it has exited."""

    def __init__(self, app: str) -> None:
        self.app = app
        self.process: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.url = ""

    def running_url(self) -> str:
        """Its URL, the process started (again) first if it is not running."""
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                self._start()
            return self.url

    def _start(self) -> None:
        with socket.socket() as sock:  # a free port (released for uvicorn to bind)
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        command = [sys.executable, "-m", "astrai.envs.openenv_serve", self.app, str(port)]
        self.process = process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"env.app {self.app!r}: its server exited at start-up")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"env.app {self.app!r}: no server on {self.url}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Sessions:
    """This process's open sessions (OpenEnv's websocket connections) per server URL, each lent
    to one episode at a time: the runner builds an environment for every episode, and a
    connection per episode would be a session per episode on the server (its
    ``max_concurrent_envs`` reached within a few steps, each new one closed at once)."""

    def __init__(self) -> None:
        self.idle: dict[str, list[Any]] = {}
        self.lock = threading.Lock()

    def lend(self, url: str, kind: Any, timeout_s: float) -> Any:
        with self.lock:
            idle = self.idle.get(url)
            if idle:
                return idle.pop()
        client = kind(base_url=url, message_timeout_s=timeout_s).sync()
        client.connect()
        return client

    def give_back(self, url: str, client: Any) -> None:
        with self.lock:
            self.idle.setdefault(url, []).append(client)


SESSIONS = Sessions()
_servers: dict[str, OpenEnvServer] = {}
_servers_lock = threading.Lock()


def openenv_server(app: str) -> OpenEnvServer:
    """This process's server of ``app``, one per app, stopped when the process exits."""
    with _servers_lock:
        if app not in _servers:
            _servers[app] = OpenEnvServer(app)
            atexit.register(_servers[app].stop)
        return _servers[app]


class OpenEnvEnvironment(Environment):
    """An OpenEnv environment's episodes (module docstring).

    Args:
        url: a running server's base URL; or
        app: ``module:attribute`` of the server's app, which astrai serves (``OpenEnvServer``).
        action_key: the action's field that takes a turn's text.
        text_key: the observation's field read as the message's content.
        observation_role: the role of that message (``tool``, ``user``).
        reset_args: the task row's fields given to ``reset`` as keyword arguments.
        mcp: an MCP environment: tool calls are its ``CallToolAction``s, its tools listed.
        metric_keys: the observation's numeric fields reported as ``env/<name>`` (``solved``
            decides an episode's accuracy; OpenEnv does not send an observation's ``metadata``).
        timeout_s: how long one reply may take (``message_timeout_s`` of OpenEnv's client).
    """

    def __init__(
        self,
        url: str | None = None,
        app: str | None = None,
        action_key: str = "message",
        text_key: str = "text",
        observation_role: str = "user",
        reset_args: list[str] | None = None,
        mcp: bool = False,
        metric_keys: list[str] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        if (url is None) == (app is None):
            raise ValueError("env=openenv needs one of env.url (a running server) or env.app")
        self.kind = _client_class()
        self.server = openenv_server(app) if app is not None else None
        self.fixed_url = url
        self.action_key, self.text_key, self.role = action_key, text_key, observation_role
        self.reset_args = list(reset_args if reset_args is not None else ["prompt"])
        self.mcp, self.timeout_s = mcp, timeout_s
        self.metric_keys = list(metric_keys or [])
        self.client: Any = None
        self.url()  # the server started here, within the constructor's time limit

    def url(self) -> str:
        return self.server.running_url() if self.server is not None else str(self.fixed_url)

    def tools(self) -> list[dict[str, Any]]:
        if not self.mcp:
            return []
        listed = self._call("step", {"type": "list_tools"})
        self._give_back()
        tools = listed.observation.get("tools") or []
        return [
            {"type": "function", "function": {"name": t["name"],
             "description": t.get("description") or "", "parameters": t.get("input_schema") or {}}}
            for t in tools
        ]  # fmt: skip

    def reset(self, row: dict[str, Any]) -> list[Message]:
        args = {key: row[key] for key in self.reset_args if key in row}
        result = self._call("reset", **args)
        return [{"role": "user", "content": self._text(result.observation)}]

    def step(self, turn: ParsedTurn) -> StepResult:
        if self.mcp and turn.calls:
            messages, reward, done = [], 0.0, False
            for call in turn.calls:
                action = {"type": "call_tool", "tool_name": call.name, "arguments": call.arguments}
                result = self._call("step", action)
                messages.append({"role": "tool", "content": _tool_text(result.observation)})
                reward, done = reward + float(result.reward or 0.0), done or bool(result.done)
            return StepResult(messages, reward, done)
        if self.mcp:  # an MCP environment takes tool calls only: a reply without one ends it
            return StepResult(done=True)
        result = self._call("step", {self.action_key: turn.content})
        reward, done = float(result.reward or 0.0), bool(result.done)
        metrics = {
            key: float(result.observation[key])
            for key in self.metric_keys
            if isinstance(result.observation.get(key), int | float)
        }
        if done:  # no observation after the last turn
            return StepResult(reward=reward, done=True, metrics=metrics)
        message = {"role": self.role, "content": self._text(result.observation)}
        return StepResult([message], reward, metrics=metrics)

    def _text(self, observation: dict[str, Any]) -> str:
        if self.text_key not in observation:
            fields = sorted(observation)
            raise ValueError(f"the observation has no {self.text_key!r} (env.text_key): {fields}")
        return str(observation[self.text_key])

    def final_reward(self) -> float:
        self._give_back()  # the episode is over (done, or cut at a limit): its session is free
        return 0.0

    def _give_back(self) -> None:
        if self.client is not None:
            SESSIONS.give_back(self.client_url, self.client)
            self.client = None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` on the episode's session (``SESSIONS`` lends one at the first call); a
        failure closes the session (the next episode connects again) and is the episode's."""
        if self.client is None:
            self.client_url = self.url()
            self.client = SESSIONS.lend(self.client_url, self.kind, self.timeout_s)
        try:
            return getattr(self.client, method)(*args, **kwargs)
        except BaseException:
            client, self.client = self.client, None
            try:
                client.close()
            except Exception:  # noqa: BLE001, S110 (a dead connection may not close cleanly)
                pass
            raise


def _tool_text(observation: dict[str, Any]) -> str:
    """A ``CallToolObservation``'s result (its text content), or its error as ``error: ...``."""
    if observation.get("error"):
        return f"error: {observation['error'].get('message', observation['error'])}"
    result = observation.get("result")
    if isinstance(result, dict) and "content" in result:
        parts = [p.get("text", "") for p in result["content"] if isinstance(p, dict)]
        return "\n".join(parts)
    return result if isinstance(result, str) else json.dumps(result)
