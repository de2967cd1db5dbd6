"""``rollout.episodes.tool_prompt``: an episode's opening shows the environment's tools to the
policy (issue 58, finding 10), for the chat families of tests/chat_families.py and SmolLM2's ChatML
template, which ignores ``tools=``. The oracle for the Hermes block is Qwen3's own template:
ChatML with the block in a system message renders exactly what Qwen3 renders with ``tools=``;
for Llama 3's JSON form, Llama 3.1's template with its tools in the system turn holds the text
verbatim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.chat_families import CHATML, write_family_tokenizer
from tests.episode_envs import EXAMPLE, TARGET

from astrai.models.hf_tokenizer import HFTokenizer
from astrai.rollout.episodes.env_spec import env_spec
from astrai.rollout.episodes.text import episode_text
from astrai.rollout.episodes.tool_prompt import (
    HERMES_HEAD,
    LLAMA3_JSON_HEAD,
    hermes_tools_text,
    llama3_json_tools_text,
    opening_renderer,
    tool_names,
    tools_shown,
    with_tool_system,
)

# a template that renders the user's turns only: neither tools nor a system message reach it
USER_ONLY = (
    "{% for m in messages %}{% if m['role'] == 'user' %}{{ '<|im_start|>user\n' + m['content'] "
    "+ '<|im_end|>\n' }}{% endif %}{% endfor %}{{ '<|im_start|>assistant\n' }}"
)


def _schema(name: str, argument: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} of a word (naïve: non-ASCII kept).",
            "parameters": {
                "type": "object",
                "properties": {argument: {"type": "string", "description": "a word."}},
                "required": [argument],
            },
        },
    }


TOOLS = [_schema("lookup", "word"), _schema("spell", "text")]
OPENINGS = {
    "user": [{"role": "user", "content": "code of kiwi?"}],
    "system": [
        {"role": "system", "content": "Answer with the code only."},
        {"role": "user", "content": "code of kiwi?"},
    ],
}


def _tokenizer(tmp_path: Path, family: str, template: str | None = None, **kwargs) -> HFTokenizer:
    directory = write_family_tokenizer(tmp_path / (family + str(template is not None)), family)
    if template is not None:
        config = json.loads((directory / "tokenizer_config.json").read_text())
        config["chat_template"] = template
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return HFTokenizer.load(directory, template_kwargs=kwargs)


def test_tool_names_and_what_counts_as_shown() -> None:
    assert tool_names(TOOLS) == ["lookup", "spell"]
    assert tool_names([{"name": "bare"}]) == ["bare"]  # a schema without the function wrapper
    # a name in the user's text is not a tools block: the render must change with the tools
    same = "<|im_start|>user\nlookup spell<|im_end|>\n"
    assert not tools_shown(same, same, ["lookup", "spell"])
    assert tools_shown(same + "lookup spell", same, ["lookup", "spell"])
    assert not tools_shown(same + "lookup", same, ["lookup", "spell"])  # one tool dropped


@pytest.mark.parametrize("opening", sorted(OPENINGS))
def test_hermes_block_in_chatml_renders_what_qwen3_renders_with_tools(
    tmp_path: Path, opening: str
) -> None:
    """SmolLM2's template drops ``tools=``: the tools go into the system message, and the text
    is Qwen3's own rendering of the same opening with ``tools=``, character for character
    (Qwen3's block is Qwen2.5's without its default system prompt)."""
    chatml = _tokenizer(tmp_path, "qwen3", CHATML)
    qwen3 = _tokenizer(tmp_path, "qwen3")
    messages = OPENINGS[opening]
    assert chatml.render_messages(messages, True, TOOLS) == chatml.render_messages(messages)
    text = opening_renderer(chatml.render_messages, TOOLS, "hermes", "chatml.jinja")(messages)
    assert text == qwen3.render_messages(messages, True, TOOLS)
    assert text.count("# Tools") == 1 and "SmolLM" not in text  # the system message replaces it
    lines = text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in lines] == TOOLS  # one schema a line
    assert text.endswith("code of kiwi?<|im_end|>\n<|im_start|>assistant\n")


def test_a_template_that_renders_tools_is_used_as_it_is(tmp_path: Path) -> None:
    """Qwen3 and Llama 3.1/3.2 write the tools themselves: the opening is their render, one
    tools block, nothing added."""
    for family in ("qwen3", "llama3_1", "llama3_2"):
        tokenizer = _tokenizer(tmp_path, family)
        for messages in OPENINGS.values():
            expected = tokenizer.render_messages(messages, True, TOOLS)
            parser = "hermes" if family == "qwen3" else "llama3_json"
            text = opening_renderer(tokenizer.render_messages, TOOLS, parser, family)(messages)
            assert text == expected, family
            assert text.count(HERMES_HEAD) + text.count(LLAMA3_JSON_HEAD[:40]) <= 1, family


def test_llama3_json_form_in_a_template_without_tools_is_llama3_1_s_text(tmp_path: Path) -> None:
    """Llama 3.0's template ignores ``tools=``: under ``llama3_json`` the tools go first in the
    system message as Llama 3.1 writes them into its system turn (tools_in_user_message=false),
    each schema as indented JSON; the opening's own system message follows them."""
    llama3 = _tokenizer(tmp_path, "llama3")
    llama31 = _tokenizer(tmp_path, "llama3_1", tools_in_user_message=False)
    block = llama3_json_tools_text(TOOLS)
    assert block in llama31.render_messages(OPENINGS["user"], True, TOOLS)
    render = opening_renderer(llama3.render_messages, TOOLS, "llama3_json", "llama3")
    for messages in OPENINGS.values():
        text = render(messages)
        assert text.startswith(
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + LLAMA3_JSON_HEAD
        )
        assert text.count(LLAMA3_JSON_HEAD) == 1
        assert json.dumps(TOOLS[1], indent=4, ensure_ascii=False) in text
    system = with_tool_system(OPENINGS["system"], TOOLS, "llama3_json")
    assert system[0]["content"] == block + "Answer with the code only."
    assert system[1:] == OPENINGS["system"][1:] and OPENINGS["system"][0]["content"] == (
        "Answer with the code only."  # the caller's messages are not changed
    )
    hermes = with_tool_system(OPENINGS["system"], TOOLS, "hermes")
    assert hermes[0]["content"] == "Answer with the code only.\n\n" + hermes_tools_text(TOOLS)


@pytest.mark.parametrize("parser", ["none", "calc_line", "lookup_env.parse_lookup"])
def test_a_format_astrai_cannot_write_is_refused_where_the_template_drops_tools(
    tmp_path: Path, parser: str
) -> None:
    chatml = _tokenizer(tmp_path, "qwen3", CHATML)
    with pytest.raises(ValueError) as refused:
        opening_renderer(chatml.render_messages, TOOLS, parser, "models/x/chat_template.jinja")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("models/x/chat_template.jinja leaves out the environment's tools")
    assert f"(lookup, spell) and env.parser={parser} has no tool format" in message
    # the same formats with a template that shows the tools itself: nothing to write
    qwen3 = _tokenizer(tmp_path, "qwen3")
    text = opening_renderer(qwen3.render_messages, TOOLS, parser, "qwen3")(OPENINGS["user"])
    assert text == qwen3.render_messages(OPENINGS["user"], True, TOOLS)


def test_a_template_that_drops_the_system_message_too_is_refused(tmp_path: Path) -> None:
    user_only = _tokenizer(tmp_path, "qwen3", USER_ONLY)
    with pytest.raises(ValueError, match="user_only leaves out the environment's tools"):
        opening_renderer(user_only.render_messages, TOOLS, "hermes", "user_only")


def test_no_tools_renders_as_before_whatever_the_format(tmp_path: Path) -> None:
    chatml = _tokenizer(tmp_path, "qwen3", CHATML)
    for parser in ("none", "hermes", "my.parser"):
        render = opening_renderer(chatml.render_messages, [], parser, "chatml")
        for messages in OPENINGS.values():
            assert render(messages) == chatml.render_messages(messages, True, None)


def test_episode_text_opening_shows_the_tools_and_refuses_at_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``episode_text`` (what the runner and the start check call): Lookup's ``lookup``
    schema in the ids of the opening under ChatML and hermes; an environment without tools
    opens exactly as the template renders the messages; a format astrai cannot write is
    refused when the text is built, naming the template file and the parser."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    chatml = _tokenizer(tmp_path, "qwen3", CHATML)
    spec = env_spec({"_target_": "lookup_env.Lookup", "parser": "hermes"})
    assert spec is not None
    tools = spec.make().tools()
    ids = episode_text(chatml, spec, tools).prompt_ids(OPENINGS["user"])
    shown = chatml.render_messages(with_tool_system(OPENINGS["user"], tools, "hermes"))
    assert ids == chatml.encode(shown, False)
    assert '{"name": "lookup", "description": "The code of a word."' in shown
    plain = env_spec({"_target_": TARGET, "parser": "none"})
    assert plain is not None and plain.make().tools() == []
    ids = episode_text(chatml, plain, []).prompt_ids(OPENINGS["user"])
    assert ids == chatml.encode(chatml.render_messages(OPENINGS["user"]), False)
    unwritable = env_spec({"_target_": "lookup_env.Lookup", "parser": "lookup_env.parse_lookup"})
    assert unwritable is not None
    with pytest.raises(ValueError, match=r"tokenizer_config\.json leaves out .* env\.parser=look"):
        episode_text(chatml, unwritable, tools)
