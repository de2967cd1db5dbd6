"""Hugging Face tokenizers and chat templates read without transformers, checked against it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import transformers  # the hf extra; `make test` installs it
from tests.helpers import write_byte_level_tokenizer

from astrai.models.hf_tokenizer import (
    HFTokenizer,
    TokenizerFileError,
    save_char_tokenizer_as_hf,
)
from astrai.models.saved_tokenizer import load_tokenizer
from astrai.models.tokenizer import CharTokenizer

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# uses bos_token, whitespace control and raise_exception like Llama 3 / Mistral templates
BOS_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}\n"
    "  {% if m['role'] not in ['user', 'assistant'] %}"
    "{{ raise_exception('bad role') }}{% endif %}\n"
    "  [{{ m['role'] | upper }}] {{ m['content'] | trim }}\n"
    "{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}"
)

# Qwen2.5-style: a tools block guarded by `tools is not none` (transformers passes tools=None and
# documents=None; left undefined, jinja's Undefined "is not none" and the block would render)
TOOLS_TEMPLATE = (
    "{% if tools is not none %}<|im_start|>system\nTools: {{ tools | length }}<|im_end|>\n"
    "{% endif %}{% if documents is not none %}[DOCS]{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("template", [CHATML, BOS_TEMPLATE, TOOLS_TEMPLATE])
@pytest.mark.parametrize("in_config", [False, True])
def test_chat_template_renders_and_encodes_like_transformers(
    tmp_path: Path, template: str, in_config: bool
) -> None:
    directory = write_byte_level_tokenizer(tmp_path, template, in_config)
    ours = load_tokenizer(directory)
    assert isinstance(ours, HFTokenizer)
    theirs = transformers.AutoTokenizer.from_pretrained(str(directory))
    prompt = "What is 12+9? "
    messages = [{"role": "user", "content": prompt}]
    text = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ours.render_prompt(prompt) == text
    ids = theirs(text, add_special_tokens=False).input_ids
    assert ours.encode_prompt(prompt) == ids
    assert ids.count(1) >= 1  # <|im_start|> (ChatML) or bos_token is a special id, not bytes


def test_decode_drops_specials_and_surrounding_space(tmp_path: Path) -> None:
    ours = load_tokenizer(write_byte_level_tokenizer(tmp_path, CHATML, False))
    ids = ours.encode(" 21 ", add_special_tokens=False) + [ours.eos_id]
    assert ours.decode(ids) == "21"
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (1, 2, 2)  # no pad token: EOS fills


def test_without_chat_template_the_prompt_is_encoded_as_is(tmp_path: Path) -> None:
    directory = write_byte_level_tokenizer(tmp_path, CHATML, False)
    ours = load_tokenizer(directory, chat_template=False)
    assert ours.render_prompt("1+1=") == "1+1="
    assert ours.encode_prompt("1+1=") == ours.encode("1+1=")


def test_char_tokenizer_hf_form_has_the_same_ids(tmp_path: Path) -> None:
    char = CharTokenizer()
    save_char_tokenizer_as_hf(char, tmp_path)
    ours = load_tokenizer(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in ["12+34=", "reverse: ab c=", "sort: zyx="]:
        assert ours.encode_prompt(text) == char.encode_prompt(text)
        assert theirs(text).input_ids == char.encode(text)
        assert ours.decode(char.encode(text)[1:] + [char.eos_id]) == text.strip()
    assert (ours.pad_id, ours.bos_id, ours.eos_id) == (0, 1, 2)
    assert ours.vocab_size == char.vocab_size == 48


def test_save_writes_the_source_files_back(tmp_path: Path) -> None:
    source = write_byte_level_tokenizer(tmp_path / "src", CHATML, False)
    out = tmp_path / "out"
    out.mkdir()
    load_tokenizer(source).save(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (out / name).read_bytes() == (source / name).read_bytes()


def test_missing_or_broken_files_are_named(tmp_path: Path) -> None:
    directory = write_byte_level_tokenizer(tmp_path, None, False)
    (directory / "tokenizer_config.json").unlink()
    with pytest.raises(TokenizerFileError, match="tokenizer_config.json"):
        load_tokenizer(directory)
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<nope>"}))
    with pytest.raises(TokenizerFileError, match="eos_token '<nope>'.*vocabulary"):
        load_tokenizer(directory)
    (directory / "tokenizer.json").write_text('{"model": 3}')
    with pytest.raises(TokenizerFileError, match="invalid tokenizer file .*tokenizer.json"):
        load_tokenizer(directory)


def test_an_invalid_generation_config_is_named(tmp_path: Path) -> None:
    directory = write_byte_level_tokenizer(tmp_path, CHATML, False)
    assert load_tokenizer(directory).generation_config is None
    (directory / "generation_config.json").write_text("[2]")
    with pytest.raises(TokenizerFileError, match="invalid .*generation_config.json: expected"):
        load_tokenizer(directory)


@pytest.mark.parametrize(
    ("eos_token_id", "stop_ids"),
    [
        (None, (2,)),  # the tokenizer's eos_token (<|im_end|>) alone
        (2, (2,)),
        (0, (2, 0)),  # <|endoftext|> too (Llama 3 Instruct: <|eot_id|> beside the EOS)
        ([0, 2, 1], (2, 0, 1)),  # eos_id first, no repeats
    ],
)
def test_a_response_ends_at_every_id_the_generation_config_declares(
    tmp_path: Path, eos_token_id: object, stop_ids: tuple[int, ...]
) -> None:
    directory = write_byte_level_tokenizer(tmp_path, CHATML, False)
    if eos_token_id is not None:
        config = {"eos_token_id": eos_token_id, "temperature": 0.6}
        (directory / "generation_config.json").write_text(json.dumps(config))
    tokenizer = load_tokenizer(directory)
    assert (tokenizer.eos_id, tokenizer.stop_ids) == (2, stop_ids)


@pytest.mark.parametrize("eos_token_id", [-1, 10**6, "2", [2, None], True, 1.0])
def test_an_end_id_outside_the_vocabulary_is_named(tmp_path: Path, eos_token_id: object) -> None:
    directory = write_byte_level_tokenizer(tmp_path, CHATML, False)
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_token_id}))
    with pytest.raises(
        TokenizerFileError,
        match=re.escape(f"{directory}/generation_config.json: eos_token_id ")
        + ".* is not a token id",
    ):
        load_tokenizer(directory)
