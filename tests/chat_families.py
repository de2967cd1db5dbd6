"""Tokenizer directories of the Qwen3 and Llama 3.x chat families, written locally (no download).

Each directory holds a small byte-level BPE ``tokenizer.json`` (the 256 byte symbols, no merges,
plus the family's special tokens), a ``tokenizer_config.json`` carrying the family's real chat
template (as its Hugging Face repository ships it) and special tokens, and the family's
``generation_config.json`` with its ``eos_token_id`` list. Ids differ from the real ones (the
real vocabularies have 128k-151k entries); which token is special, which ends a turn and what
the template renders are the family's own.

``save_scripted_model`` adds a transformers ``LlamaForCausalLM`` whose greedy continuation is a
fixed script of tokens, so a test can make a model emit a family's end-of-turn token.
"""

# the templates' lines are the families' own, long ones included
# ruff: noqa: E501

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

# Qwen3-0.6B / Qwen3-8B (tokenizer_config.json's chat_template): reasoning of earlier assistant
# turns dropped, `enable_thinking=false` opens the answer with an empty <think></think> block
QWEN3_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

# Meta-Llama-3-8B-Instruct (Llama 3.0): BOS before the first turn, no system header of its own
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

_LLAMA31_HEADER = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
"""

_LLAMA32_HEADER = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
"""

# the part of the system turn both Llama 3.1 and 3.2 write after their header lines, and the
# first user turn that carries custom tools
_LLAMA3X_SYSTEM = r"""{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
"""

_LLAMA31_TOOL_CALL = r"""        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
"""

_LLAMA32_TOOL_CALL = r"""        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
"""

_LLAMA3X_END = r"""    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Llama-3.1-8B-Instruct: a fixed "Today Date" unless the caller passes date_string; builtin
# tools (brave_search, wolfram_alpha) as <|python_tag|> calls ending in <|eom_id|>
LLAMA3_1_TEMPLATE = _LLAMA31_HEADER + _LLAMA3X_SYSTEM + _LLAMA31_TOOL_CALL + _LLAMA3X_END
# Llama-3.2-1B/3B-Instruct: today's date through strftime_now, no builtin tools
LLAMA3_2_TEMPLATE = _LLAMA32_HEADER + _LLAMA3X_SYSTEM + _LLAMA32_TOOL_CALL + _LLAMA3X_END


# SmolLM2-135M-Instruct's template (ChatML with its default system prompt)
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Family:
    """What a chat family's tokenizer directory holds.

    Attributes:
        specials: the tokenizer's added tokens, in id order after the 256 byte symbols, each
            with whether it is special (decoded away) or text (Qwen3's ``<think>``).
        config: ``tokenizer_config.json``'s special tokens (the template is added).
        end_tokens: ``generation_config.json``'s ``eos_token_id``, as tokens.
    """

    template: str
    specials: tuple[tuple[str, bool], ...]
    config: dict[str, str | None]
    end_tokens: tuple[str, ...]
    bos: str | None = None  # what the post-processor puts before a plain encoding


QWEN_SPECIALS = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),  # Qwen3's reasoning tags are added tokens but not special: kept as text
    ("</think>", False),
)
LLAMA_SPECIALS = (
    ("<|begin_of_text|>", True),
    ("<|end_of_text|>", True),
    ("<|start_header_id|>", True),
    ("<|end_header_id|>", True),
    ("<|eom_id|>", True),
    ("<|eot_id|>", True),
    ("<|python_tag|>", True),
)

FAMILIES = {
    # Qwen3-0.6B: no BOS; generation_config.json ends at <|im_end|> and <|endoftext|>
    "qwen3": Family(
        QWEN3_TEMPLATE,
        QWEN_SPECIALS,
        {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        ("<|im_end|>", "<|endoftext|>"),
    ),
    # Meta-Llama-3-8B-Instruct as first released: eos_token <|end_of_text|>, so <|eot_id|> is
    # an end only through generation_config.json
    "llama3": Family(
        LLAMA3_TEMPLATE,
        LLAMA_SPECIALS,
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
        ("<|end_of_text|>", "<|eot_id|>"),
        bos="<|begin_of_text|>",
    ),
    "llama3_1": Family(
        LLAMA3_1_TEMPLATE,
        LLAMA_SPECIALS,
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
        bos="<|begin_of_text|>",
    ),
    "llama3_2": Family(
        LLAMA3_2_TEMPLATE,
        LLAMA_SPECIALS,
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
        bos="<|begin_of_text|>",
    ),
}


def write_family_tokenizer(directory: Path, name: str) -> Path:
    """``directory`` with family ``name``'s tokenizer files (see the module docstring)."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE

    family = FAMILIES[name]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    vocab.update({token: len(alphabet) + i for i, (token, _) in enumerate(family.specials)})
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=[]))
    tokenizer.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in family.specials])
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    if family.bos is not None:  # Llama 3's post-processor puts BOS first, as its tokenizer.json
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{family.bos} $A", pair=f"{family.bos} $A $B",
            special_tokens=[(family.bos, vocab[family.bos])],
        )  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **family.config,
        "chat_template": family.template,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    write_generation_config(directory, name)
    return directory


def write_generation_config(directory: Path, name: str) -> None:
    """The family's ``generation_config.json``: its end ids and sampling defaults."""
    family = FAMILIES[name]
    vocab = json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"]
    config = {
        "bos_token_id": vocab[family.config["bos_token"] or "<|endoftext|>"],
        "do_sample": True,
        "eos_token_id": [vocab[t] for t in family.end_tokens],
        "temperature": 0.6,
        "top_p": 0.95 if name == "qwen3" else 0.9,
    }
    (directory / "generation_config.json").write_text(json.dumps(config, indent=2))


def token_id(directory: Path, token: str) -> int:
    """The id of ``token`` (an added token, or one character) in ``directory``'s tokenizer."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    found = tokenizer.token_to_id(token)
    if found is None:
        [found] = tokenizer.encode(token, add_special_tokens=False).ids
    return int(found)


def save_scripted_model(directory: Path, name: str, script: list[str]) -> Path:
    """Family ``name``'s tokenizer files plus a ``save_pretrained`` transformers Llama whose
    greedy next token after ``script[i]`` is ``script[i + 1]`` (the tokens distinct).

    Attention and MLP outputs are zero, so the residual stream at a position is its token's
    embedding: ``script[i]`` embeds as the unit vector ``e_i``, which the final RMSNorm scales
    to ``sqrt(hidden)·e_i``, and ``lm_head`` row ``script[i + 1]`` is ``e_i``: that token's
    logit is 8, every other one 0. Any other token embeds as zeros (all logits 0)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    write_family_tokenizer(directory, name)
    ids = [token_id(directory, token) for token in script]
    assert len(set(ids)) == len(ids), f"script tokens repeat: {script}"
    vocab_size = len(json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"])
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for i, (current, following) in enumerate(zip(ids, ids[1:], strict=False)):
            model.model.embed_tokens.weight[current, i] = 1.0
            model.lm_head.weight[following, i] = 1.0
    model.save_pretrained(str(directory))
    write_generation_config(directory, name)  # save_pretrained wrote the model's own
    return directory
