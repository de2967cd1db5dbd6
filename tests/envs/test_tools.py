"""``envs.tools``: ``@tool`` methods as OpenAI function schemas from hints and docstrings, and
calls checked against their signatures (issue 50, part 1)."""

from __future__ import annotations

from typing import Any

import pytest

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn, ToolCall
from astrai.envs.tools import ToolEnvironment, ToolError, tool


class Calculator(ToolEnvironment):
    @tool
    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: the first factor.
            b: the second factor, which may be
                negative.
        """
        return a * b

    @tool
    def scale(self, x: float, by: float | None = None) -> float:
        """Scale a number."""
        return x * (2.0 if by is None else by)

    def helper(self) -> None:  # not a tool
        raise AssertionError

    def reset(self, row: dict[str, Any]) -> list[Message]:  # an Environment's own two methods
        return []

    def step(self, turn: ParsedTurn) -> StepResult:
        return StepResult(done=True)


def test_tools_become_openai_function_schemas() -> None:
    schemas = Calculator().schemas()
    assert [s["function"]["name"] for s in schemas] == ["multiply", "scale"]
    multiply = schemas[0]["function"]
    assert multiply["description"] == "Multiply two integers."
    assert multiply["parameters"] == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "the first factor."},
            "b": {"type": "integer", "description": "the second factor, which may be negative."},
        },
        "required": ["a", "b"],
    }
    scale = schemas[1]["function"]["parameters"]
    assert scale["properties"]["by"] == {"type": "number", "description": ""}
    assert scale["required"] == ["x"]


def test_calls_run_and_bad_ones_are_tool_errors() -> None:
    calc = Calculator()
    assert calc.call(ToolCall("multiply", {"a": 12, "b": 34})) == 408
    assert calc.call(ToolCall("scale", {"x": 1.5})) == 3.0
    with pytest.raises(ToolError, match=r"unknown tool 'divide' \(tools: multiply, scale\)"):
        calc.call(ToolCall("divide", {}))
    with pytest.raises(ToolError, match="multiply: missing a required argument: 'b'"):
        calc.call(ToolCall("multiply", {"a": 1}))
    with pytest.raises(ToolError, match="helper"):
        calc.call(ToolCall("helper", {}))


def test_a_tool_environment_is_an_environment_and_needs_reset_and_step() -> None:
    calc = Calculator()
    assert isinstance(calc, Environment) and calc.tools() == calc.schemas()

    class NoStep(ToolEnvironment):
        def reset(self, row: dict[str, Any]) -> list[Message]:
            return []

    with pytest.raises(TypeError, match="abstract method.*step"):
        NoStep()  # type: ignore[abstract]
