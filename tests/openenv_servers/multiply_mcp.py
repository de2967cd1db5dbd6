"""An MCP environment on openenv-core's server classes (``MCPEnvironment`` over a FastMCP server)
for ``tests/envs/test_openenv.py``: a ``multiply`` tool, each call of which earns 0.25 and ends
nothing; served by OpenEnv's own server (``uvicorn multiply_mcp:app``)."""

from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Observation, State


class MultiplyEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("multiply")

        @mcp.tool()
        def multiply(a: int, b: int) -> int:
            """Multiply two integers."""
            return a * b

        super().__init__(mcp)
        self._state = State()

    def reset(self, seed: Any = None, episode_id: Any = None, **kwargs: Any) -> Observation:
        self._state = State(step_count=0)
        return CallToolObservation(tool_name="reset", result=str(kwargs["prompt"]))

    async def step_async(self, action: Any, timeout_s: Any = None, **kwargs: Any) -> Observation:
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and observation.error is None:
            observation.reward = 0.25
        return observation

    def _step_impl(self, action: Any, timeout_s: Any = None, **kwargs: Any) -> Observation:
        return Observation(done=True, reward=None)

    @property
    def state(self) -> State:
        return self._state


app = create_fastapi_app(
    MultiplyEnvironment, CallToolAction, CallToolObservation, max_concurrent_envs=64
)
