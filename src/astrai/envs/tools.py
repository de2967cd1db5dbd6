"""Tools an environment offers: its methods marked ``@tool`` become OpenAI function schemas, read
from their type hints and docstrings (TRL's ``environment_factory`` does the same with plain
functions), and calls by name run them with their arguments checked.

    class Calculator(ToolEnvironment):
        @tool
        def multiply(self, a: int, b: int) -> int:
            \"\"\"Multiply two integers.

            Args:
                a: the first factor.
                b: the second factor.
            \"\"\"
            return a * b

        def reset(self, row): ...           # an Environment's own two methods
        def step(self, turn): ...

``Calculator().schemas()`` is what a chat template's ``tools=`` takes (``tools()`` returns
them); ``call(ToolCall)`` runs one, and a wrong name or argument is a ``ToolError`` whose text
the policy sees. A ``ToolEnvironment`` is an ``envs.base.Environment``.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from astrai.envs.base import Environment
from astrai.envs.tool_calls import ToolCall

TOOL_MARK = "__astrai_tool__"
JSON_TYPES: dict[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    list: "array",
    dict: "object",
}


class ToolError(Exception):
    """A call the environment cannot run (unknown tool, wrong arguments); its message is what
    the policy reads in the tool's reply."""


def tool(method: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a method of a ``ToolEnvironment`` as a tool."""
    setattr(method, TOOL_MARK, True)
    return method


def _json_type(hint: Any) -> dict[str, Any]:
    """The JSON schema of a parameter's type hint (``int | None`` is its ``int``'s)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _json_type(inner[0]) if len(inner) == 1 else {}
    if origin is not None:
        hint = origin
    return {"type": JSON_TYPES[hint]} if hint in JSON_TYPES else {}


def _described(doc: str) -> tuple[str, dict[str, str]]:
    """A Google-style docstring's summary and its ``Args:`` descriptions by name."""
    text = inspect.cleandoc(doc)
    summary = text.split("\n\n", 1)[0].replace("\n", " ").strip()
    described: dict[str, str] = {}
    section = re.search(r"^Args:\n((?:[ \t]+.*\n?)+)", text, re.MULTILINE)
    if section:
        name = None
        for line in section.group(1).splitlines():
            entry = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
            if entry and (name is None or not line.startswith(" " * 8)):
                name, described[entry.group(1)] = entry.group(1), entry.group(2).strip()
            elif name is not None:
                described[name] += " " + line.strip()
    return summary, described


def function_schema(method: Callable[..., Any]) -> dict[str, Any]:
    """``method``'s OpenAI function schema: name, the docstring's summary, and each parameter
    with its JSON type and its ``Args:`` description; those without a default are required."""
    signature = inspect.signature(method)
    hints = typing.get_type_hints(method)
    summary, described = _described(method.__doc__ or "")
    properties, required = {}, []
    for name, parameter in signature.parameters.items():
        if name == "self":
            continue
        properties[name] = {**_json_type(hints.get(name)), "description": described.get(name, "")}
        if parameter.default is inspect.Parameter.empty:
            required.append(name)
    return {
        "type": "function",
        "function": {
            "name": method.__name__,
            "description": summary,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


class ToolEnvironment(Environment):
    """An ``Environment`` whose ``@tool`` methods are its tools (``schemas``, ``call``); its
    subclasses implement ``reset`` and ``step`` as any environment does."""

    def tool_methods(self) -> dict[str, Callable[..., Any]]:
        """The bound ``@tool`` methods by name, in definition order."""
        found = {}
        for cls in reversed(type(self).__mro__):
            for name, value in vars(cls).items():
                if getattr(value, TOOL_MARK, False):
                    found[name] = getattr(self, name)
        return found

    def schemas(self) -> list[dict[str, Any]]:
        """Every tool's OpenAI function schema (a chat template's ``tools=``)."""
        return [function_schema(method) for method in self.tool_methods().values()]

    def tools(self) -> list[dict[str, Any]]:
        """The tools offered (``envs.base.Environment.tools``): the schemas."""
        return self.schemas()

    def call(self, call: ToolCall) -> Any:
        """Run one call; ``ToolError`` for an unknown tool or arguments its signature refuses
        (an exception inside the tool is the caller's to turn into an error reply)."""
        methods = self.tool_methods()
        method = methods.get(call.name)
        if method is None:
            raise ToolError(f"unknown tool {call.name!r} (tools: {', '.join(methods)})")
        try:
            inspect.signature(method).bind(**call.arguments)
        except TypeError as err:
            raise ToolError(f"{call.name}: {err}") from None
        return method(**call.arguments)
