"""``envs.tool_calls``: tool calls read from sampled text, per format; a malformed call is an
error the environment answers, never an exception (issue 50, part 3)."""

from __future__ import annotations

from astrai.envs.tool_calls import PARSERS, STOP_STRINGS, ParseError, ToolCall, parse_hermes
from astrai.envs.tool_calls import parse_llama3_json as llama3


def test_hermes_reads_every_block_and_keeps_the_content_before() -> None:
    text = (
        'Let me compute.\n<tool_call>\n{"name": "multiply", "arguments": {"a": 12, "b": 34}}\n'
        '</tool_call>\n<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}'
        "</tool_call>"
    )
    turn = parse_hermes(text)
    assert turn.content == "Let me compute."
    assert turn.calls == [
        ToolCall("multiply", {"a": 12, "b": 34}),
        ToolCall("add", {"a": 1, "b": 2}),
    ]
    assert turn.errors == []
    assert parse_hermes("just an answer: 408").calls == []


def test_hermes_errors_name_what_is_wrong() -> None:
    turn = parse_hermes('<tool_call>{"name": "f", "arguments": {}</tool_call><tool_call>[1]')
    assert turn.calls == []
    assert [e.why.split(":")[0] for e in turn.errors] == [
        "not JSON",
        "no </tool_call> after <tool_call>",
    ]
    missing = parse_hermes('<tool_call>{"arguments": {}}</tool_call>').errors
    assert missing == [ParseError('{"arguments": {}}', 'a tool call needs a "name" (a string)')]
    bad_args = parse_hermes('<tool_call>{"name": "f", "arguments": [1]}</tool_call>').errors
    assert bad_args[0].why == '"arguments" is not a JSON object'


def test_llama3_json_calls_with_and_without_the_python_tag() -> None:
    one = llama3('{"name": "multiply", "parameters": {"a": 3, "b": "x;y"}}')
    assert one.calls == [ToolCall("multiply", {"a": 3, "b": "x;y"})] and one.content == ""
    tagged = llama3(
        '<|python_tag|>{"name": "f", "parameters": {}}; {"name": "g", "parameters": {"k": 1}}'
    )
    assert tagged.calls == [ToolCall("f", {}), ToolCall("g", {"k": 1})]
    plain = llama3("The answer is 408.")
    assert plain.calls == [] and plain.errors == [] and plain.content == "The answer is 408."
    broken = llama3('{"name": "f", "parameters": {}')
    assert broken.calls == [] and broken.errors[0].why.startswith("not JSON: ")
    junk = llama3("{1} trailing")
    assert junk.errors[0].why == "a tool call is one JSON object"


def test_every_format_has_a_parser_and_its_stop_strings() -> None:
    assert set(PARSERS) == set(STOP_STRINGS) == {"hermes", "llama3_json"}
    assert STOP_STRINGS["hermes"] == ["</tool_call>"]
