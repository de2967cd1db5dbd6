"""Multi-turn, tool-using episodes (issue 50): what an environment is (``Environment``,
``StepResult``), the tools it offers (``ToolEnvironment``, ``@tool``) and how an assistant
turn's tool calls are read from its sampled text (``ParsedTurn``, ``ToolCall``). The episode
runner (``astrai.rollout.episodes.runner``) drives them through the engines; ``env=...`` selects one
(docs/environments.md)."""

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn, ParseError, ToolCall
from astrai.envs.tools import ToolEnvironment, ToolError, tool

__all__ = [
    "Environment",
    "Message",
    "ParseError",
    "ParsedTurn",
    "StepResult",
    "ToolCall",
    "ToolEnvironment",
    "ToolError",
    "tool",
]
