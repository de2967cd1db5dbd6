"""Tools that reach the model: the opening of an episode rendered with the environment's tools
(issue 58, finding 10).

A chat template is given the tools as ``tools=`` (Qwen2.5/3 and Llama 3.1-3.3 write them into
their system or first user turn), but many templates ignore the argument: SmolLM2's ChatML
template renders the same text with or without it, so the policy never learns that a tool
exists or how to call it. ``opening_renderer`` checks every render: where the template shows the
tools (each tool's name in the text more often than in the render without them) it is
used as it is; where it drops them, the tools go into the system message in the format the
environment's parser reads (``env.parser``), as the family that defines the format writes them:

- ``hermes``: Qwen2.5's and Qwen3's tools block (``# Tools`` ... ``<tools>`` with one JSON schema
  per line ``</tools>`` and the instruction to answer in ``<tool_call>{"name": ...,
  "arguments": ...}</tool_call>``), after the opening's own system message and a blank line
  (Qwen3 writes it so); a system message of its own when the opening has none (it then
  replaces a template's default system prompt, as any system message does).
- ``llama3_json``: Llama 3.1's system-turn form (``You have access to the following
  functions...``, each schema as indented JSON), before the opening's own system message.

A format astrai does not know how to write (``none``, ``calc_line``, a user's
``module.function``) with a template that drops the tools is refused at start (``ValueError``,
one line naming the template file and ``env.parser``): the policy would be rewarded for calls
it was never told about. An environment without tools renders exactly as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from astrai.envs.base import Message

Tools = list[dict[str, Any]]
# (messages, add_generation_prompt, tools) -> text: ``HFTokenizer.render_messages``
RenderWithTools = Callable[[Sequence[Message], bool, Tools | None], str]

# Qwen2.5's / Qwen3's words around the schemas (their templates' `if tools` block)
HERMES_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
HERMES_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
# Llama 3.1's words before the schemas (its template with tools_in_user_message=false)
LLAMA3_JSON_HEAD = (
    "You have access to the following functions. To call a function, please respond with JSON "
    "for a function call."
    'Respond in the format {"name": function name, "parameters": dictionary of argument name '
    "and its value}."
    "Do not use variables.\n\n"
)
PROBE: list[Message] = [{"role": "user", "content": "Hi."}]


def _tojson(value: Any, indent: int | None = None) -> str:
    """A chat template's ``tojson`` (transformers': ``ensure_ascii=False``)."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


def hermes_tools_text(tools: Tools) -> str:
    """The Hermes tools block, as Qwen2.5 and Qwen3 write it into their system turn."""
    return HERMES_HEAD + "".join("\n" + _tojson(tool) for tool in tools) + HERMES_TAIL


def llama3_json_tools_text(tools: Tools) -> str:
    """Llama 3.1's custom tools text of its system turn: each schema as indented JSON."""
    return LLAMA3_JSON_HEAD + "".join(_tojson(tool, 4) + "\n\n" for tool in tools)


def _hermes_system(system: str | None, tools: Tools) -> str:
    block = hermes_tools_text(tools)
    return block if not system else f"{system}\n\n{block}"


def _llama3_system(system: str | None, tools: Tools) -> str:
    return llama3_json_tools_text(tools) + (system or "")


# env.parser -> (the system message's content without tools or None, tools) -> with them
TOOL_SYSTEM: dict[str, Callable[[str | None, Tools], str]] = {
    "hermes": _hermes_system,
    "llama3_json": _llama3_system,
}


def tool_names(tools: Tools) -> list[str]:
    """Each tool's name: an OpenAI function schema's ``function.name`` (or a bare ``name``)."""
    names = []
    for tool in tools:
        function = tool.get("function", tool)
        name = function.get("name") if isinstance(function, dict) else None
        names.append(str(name) if name is not None else "")
    return names


def tools_shown(with_tools: str, without_tools: str, names: Sequence[str]) -> bool:
    """Whether a template's render with tools shows them: every tool's name occurs in it more
    often than in the render without them (a name may be in the user's text too)."""
    return all(with_tools.count(name) > without_tools.count(name) for name in names)


def with_tool_system(messages: Sequence[Message], tools: Tools, parser: str) -> list[Message]:
    """``messages`` with the tools written into their system message in ``parser``'s format
    (``TOOL_SYSTEM``): the first message's content extended when it is a system message, a
    system message put first otherwise."""
    write = TOOL_SYSTEM[parser]
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = write(str(first.get("content") or ""), tools)
        return [first, *messages[1:]]
    return [{"role": "system", "content": write(None, tools)}, *messages]


def opening_renderer(
    render: RenderWithTools, tools: Tools, parser: str, template: str
) -> Callable[[Sequence[Message]], str]:
    """The text of an episode's opening (messages -> text with the generation prompt) that
    shows ``tools`` (module docstring); ``template`` names the template in errors. Probed at
    once on a one-message opening: ``ValueError`` (one line) when the template drops the tools
    and ``parser`` has no format astrai can write them in, or the tools written into the
    system message do not reach the text either (a template that drops system messages)."""
    if not tools:
        return lambda messages: render(messages, True, None)
    names = tool_names(tools)
    listed = ", ".join(names)
    in_template = tools_shown(render(PROBE, True, tools), render(PROBE, True, None), names)
    if not in_template and parser not in TOOL_SYSTEM:
        raise ValueError(
            f"{template} leaves out the environment's tools ({listed}) and env.parser={parser} "
            f"has no tool format astrai can write into the system message "
            f"({' or '.join(TOOL_SYSTEM)} can): the policy would never be told about them"
        )

    def text(messages: Sequence[Message]) -> str:
        if in_template:
            shown = render(messages, True, tools)
            if tools_shown(shown, render(messages, True, None), names):
                return shown
        if parser in TOOL_SYSTEM:
            rendered = render(with_tool_system(messages, tools, parser), True, None)
            if tools_shown(rendered, render(messages, True, None), names):
                return rendered
        raise ValueError(
            f"{template} leaves out the environment's tools ({listed}) from this opening, "
            f"as tools= and in a system message (env.parser={parser})"
        )

    text(PROBE)  # a template that drops system messages too: refused at start
    return text
