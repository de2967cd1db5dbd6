"""A Hugging Face tokenizer directory, read with the ``tokenizers`` library and ``jinja2`` only.

Reads ``tokenizer.json`` (the fast-tokenizer file every modern checkpoint ships),
``tokenizer_config.json`` (special tokens) and the chat template (``chat_template.jinja``, as
transformers 5 writes it, or the ``chat_template`` key of ``tokenizer_config.json``, as 4.x
did). The model's ``generation_config.json`` (end-of-turn ids, sampling defaults), when there is
one, travels with these files: checkpoints keep it and an export writes it back.
``transformers`` is not needed. Task prompts go through the chat template as one user message
with the generation prompt appended, like ``apply_chat_template(...,
add_generation_prompt=True)``; the rendered text already holds its special tokens, so it is
encoded without the post-processor's (as transformers does).

Also builds the Hugging Face form of astrai's character tokenizer, so an exported tiny policy
loads in ``transformers`` and vLLM with the same ids.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from astrai.chat import Prompt
from astrai.files import naming_write_errors
from astrai.models.tokenizer import SPECIAL_TOKENS, TOKENIZER_FILE, CharTokenizer

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
GENERATION_CONFIG_FILE = "generation_config.json"
# read when present and written back verbatim by ``HFTokenizer.save`` (into checkpoints too)
SOURCE_FILES = (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, CHAT_TEMPLATE_FILE, GENERATION_CONFIG_FILE)
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")
# the variables astrai itself passes to a chat template: ``chat_template_kwargs`` may not set them
TEMPLATE_VARIABLES = (
    "messages",
    "add_generation_prompt",
    "tools",
    "documents",
    *SPECIAL_TOKEN_KEYS,
)


class TokenizerFileError(ValueError):
    """A tokenizer directory that cannot be used; the message names the file."""


def _token_text(value: Any) -> str | None:
    """A special-token entry (a string, or an AddedToken dict with ``content``) -> its text."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def compile_chat_template(template: str) -> Any:
    """A Hugging Face chat template as a ``jinja2.Template`` with transformers' settings:
    sandboxed, ``trim_blocks``, ``lstrip_blocks``, ``raise_exception``, ``strftime_now``,
    ``tojson``. Compiled once per tokenizer: rendering is on the rollout path."""
    from jinja2.exceptions import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, **_: Any) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def _json_object(payload: bytes, path: Path) -> dict[str, Any]:
    """A JSON object file's contents, or ``TokenizerFileError`` naming ``path``."""
    try:
        value = json.loads(payload)
        if not isinstance(value, dict):
            raise ValueError("expected a JSON object")
    except ValueError as err:  # JSON and UTF-8 errors
        raise TokenizerFileError(f"invalid {path}: {err}") from err
    return value


def declared_end_ids(generation_config: dict[str, Any] | None, vocab_size: int) -> list[int]:
    """``generation_config.json``'s ``eos_token_id`` (one id or a list) as a list; a value that
    is not an id of the vocabulary is ``TokenizerFileError`` naming the file."""
    declared = (generation_config or {}).get("eos_token_id")
    if declared is None:
        return []
    ids = declared if isinstance(declared, list) else [declared]
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
            raise TokenizerFileError(
                f"{GENERATION_CONFIG_FILE}: eos_token_id {declared!r} is not a token id (or a "
                f"list of them) of the tokenizer's {vocab_size}"
            )
    return ids


def check_template_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``chat_template_kwargs`` as a plain dict, or a ValueError naming the key: a string key
    that is not one of the variables astrai passes itself (``TEMPLATE_VARIABLES``)."""
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"chat_template_kwargs must be a mapping (got {kwargs!r})")
    for key in kwargs:
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"chat_template_kwargs key {key!r} is not a template variable name")
        if key in TEMPLATE_VARIABLES:
            raise ValueError(
                f"chat_template_kwargs key {key!r} is set by astrai itself; choose a template "
                "option such as enable_thinking"
            )
    return dict(kwargs)


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` plus special tokens and an optional chat template.

    Attributes:
        bos_id / eos_id / pad_id: from ``tokenizer_config.json``; ``eos`` ends a response (for
            chat models the end-of-turn token, e.g. ``<|im_end|>``); ``pad`` falls back to EOS
            (masks decide what is padding); ``bos`` falls back to EOS too (only a fill value).
        special_token_ids: ``bos_token_id`` / ``eos_token_id`` / ``pad_token_id`` as the
            tokenizer defines them, None where it has no such token (no fallback: what an
            export declares).
        chat_template: the template text, or None when the model has none or it is switched off.
        template_kwargs: extra variables every render passes to the template, as
            ``apply_chat_template(..., **kwargs)`` does (e.g. Qwen3's ``enable_thinking``).
        generation_config: the model's ``generation_config.json``, or None.
    """

    def __init__(
        self,
        tokenizer: Any,
        config: dict[str, Any],
        chat_template: str | None,
        files: dict[str, bytes],
        generation_config: dict[str, Any] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        self.config = config
        self.chat_template = chat_template
        self.template_kwargs = check_template_kwargs(template_kwargs or {})
        # the file the template was read from (``load``), for messages about it
        self.template_file: Path | None = None
        self._template = None
        if chat_template is not None:
            from jinja2.exceptions import TemplateError

            try:
                self._template = compile_chat_template(chat_template)
            except TemplateError as err:
                raise TokenizerFileError(f"chat template does not compile: {err}") from err
        self._files = files  # the source files, written back verbatim by ``save``
        self._longest: int | None = None  # ``longest_token_chars``, once asked
        self.generation_config = generation_config
        self.special_tokens = {
            key: text for key in SPECIAL_TOKEN_KEYS if (text := _token_text(config.get(key)))
        }
        ids = {key: tokenizer.token_to_id(text) for key, text in self.special_tokens.items()}
        if ids.get("eos_token") is None:
            raise TokenizerFileError(
                f"{TOKENIZER_CONFIG_FILE}: eos_token {self.special_tokens.get('eos_token')!r} "
                "is missing or not in the vocabulary (a response could never end)"
            )
        self.eos_id: int = ids["eos_token"]
        self.special_token_ids: dict[str, int | None] = {
            f"{key}_id": ids.get(key) for key in ("bos_token", "eos_token", "pad_token")
        }
        pad, bos = ids.get("pad_token"), ids.get("bos_token")
        self.pad_id: int = pad if pad is not None else self.eos_id
        self.bos_id: int = bos if bos is not None else self.eos_id
        # eos_id, then the other ids generation_config.json ends a response at (an instruct
        # model's end of turn, e.g. Llama 3's <|eot_id|> beside <|end_of_text|>): transformers'
        # and vLLM's generate stop at each of them
        declared = declared_end_ids(generation_config, self.vocab_size)
        self._stop_ids = tuple(dict.fromkeys((self.eos_id, *declared)))

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return self._stop_ids

    @classmethod
    def load(
        cls,
        directory: str | Path,
        chat_template: bool = True,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> HFTokenizer:
        """Read a tokenizer directory; every problem names the file. ``template_kwargs``: see
        the class."""
        from tokenizers import Tokenizer

        directory = Path(directory)
        files: dict[str, bytes] = {}
        for name in SOURCE_FILES:
            if (directory / name).is_file():
                files[name] = (directory / name).read_bytes()
        for name in (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE):
            if name not in files:
                raise TokenizerFileError(f"tokenizer file not found: {directory / name}")
        try:
            tokenizer = Tokenizer.from_str(files[TOKENIZER_FILE].decode())
        except Exception as err:
            path = directory / TOKENIZER_FILE
            raise TokenizerFileError(f"invalid tokenizer file {path}: {err}") from err
        config = _json_object(files[TOKENIZER_CONFIG_FILE], directory / TOKENIZER_CONFIG_FILE)
        generation_config = None
        if GENERATION_CONFIG_FILE in files:
            path = directory / GENERATION_CONFIG_FILE
            generation_config = _json_object(files[GENERATION_CONFIG_FILE], path)
        template, source = None, directory / TOKENIZER_CONFIG_FILE
        if CHAT_TEMPLATE_FILE in files:
            template, source = files[CHAT_TEMPLATE_FILE].decode(), directory / CHAT_TEMPLATE_FILE
        elif isinstance(config.get("chat_template"), str):
            template = config["chat_template"]
        elif isinstance(config.get("chat_template"), list):  # named templates (4.x)
            named = {t.get("name"): t.get("template") for t in config["chat_template"]}
            template = named.get("default")
        template = template if chat_template else None
        try:
            loaded = cls(tokenizer, config, template, files, generation_config, template_kwargs)
        except TokenizerFileError as err:
            raise TokenizerFileError(f"{directory}/{err}") from err
        loaded.template_file = source if template is not None else None
        return loaded

    @property
    def vocab_size(self) -> int:
        """Ids the tokenizer can produce (the model's embedding may have more rows)."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def render_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        """Chat turns (``{"role", "content"}``) through the chat template; the generation
        prompt (the assistant's turn opening) appended unless ``add_generation_prompt=False``;
        ``tools``: OpenAI function schemas, the template's ``tools`` (a multi-turn episode's)."""
        if self._template is None:
            raise ValueError("chat messages need a tokenizer with a chat template")
        from jinja2.exceptions import TemplateError

        try:
            # tools/documents as None, as apply_chat_template passes them: left undefined, a
            # template's `{% if tools is not none %}` would be true and render a tools block
            return str(
                self._template.render(
                    messages=[dict(m) for m in messages],
                    tools=tools,
                    documents=None,
                    add_generation_prompt=add_generation_prompt,
                    **self.special_tokens,
                    **self.template_kwargs,
                )
            )
        except TemplateError as err:  # the template's own raise_exception ("roles must ...")
            raise ValueError(f"the chat template refuses these turns: {err}") from err
        except Exception as err:  # a template is the model author's code: 1/0, a bad filter
            raise ValueError(
                f"the chat template fails on these turns: {type(err).__name__}: {err}"
            ) from err

    def render_prompt(self, prompt: Prompt) -> str:
        """The text the policy sees: the chat template around the turns (a string is one user
        turn), or the string itself when there is no template."""
        if isinstance(prompt, str):
            if self._template is None:
                return prompt
            return self.render_messages([{"role": "user", "content": prompt}])
        return self.render_messages(prompt)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The prompt's ids as the policy sees them. ``ValueError`` when the chat template
        renders it as no tokens, or leaves out the text of a user turn (a template that
        ignores ``content``): the policy would answer nothing, or something else; the pre-run
        check (``tasks.prompt_fit``) and ``astrai.generate`` name the template file."""
        if self.chat_template is None:  # the post-processor adds BOS where the model wants it
            ids = self.encode(self.render_prompt(prompt))
        else:
            text = self.render_prompt(prompt)
            if not text.strip():
                raise ValueError("the chat template renders the prompt as empty text")
            left_out = _left_out_user_text(prompt, text)
            if left_out is not None:
                raise ValueError(
                    f"the chat template renders the prompt without its user text {left_out!r} "
                    f"(rendered: {text[:80]!r})"
                )
            ids = self.encode(text, add_special_tokens=False)
        if not ids:
            rendered = "the chat template renders" if self.chat_template else "it encodes as"
            raise ValueError(f"the prompt is empty: {rendered} no tokens")
        return ids

    def longest_token_chars(self) -> int:
        """An upper bound on the characters one token decodes to: the longest vocabulary entry
        (a byte-level entry holds one character per byte, so it is never shorter than its
        text). Computed once (~0.1 s for 150k entries)."""
        if self._longest is None:
            self._longest = max(len(t) for t in self._tokenizer.get_vocab(with_added_tokens=True))
        return self._longest

    def token_text(self, token_id: int) -> str | None:
        """The text of one token of the vocabulary (a special token's too), None if none."""
        text = self._tokenizer.id_to_token(token_id)
        return None if text is None else str(text)

    def decode(self, ids: list[int]) -> str:
        """Special tokens dropped and surrounding whitespace stripped: a byte-level BPE answer
        often starts with a space (``" 7"``) that no task's reference has."""
        return str(self._tokenizer.decode(ids, skip_special_tokens=True)).strip()

    def save(self, directory: str | Path) -> Path:
        """Write the source files back byte for byte; return the ``tokenizer.json`` path."""
        directory = Path(directory)
        for name, payload in self._files.items():
            with naming_write_errors(directory / name):
                (directory / name).write_bytes(payload)
        if self.chat_template is not None and CHAT_TEMPLATE_FILE not in self._files:
            with naming_write_errors(directory / CHAT_TEMPLATE_FILE):
                (directory / CHAT_TEMPLATE_FILE).write_text(self.chat_template)
        return directory / TOKENIZER_FILE


def _left_out_user_text(prompt: Prompt, rendered: str) -> str | None:
    """The first user turn's text (stripped: templates trim it, Llama 3's among them) that
    ``rendered`` does not contain, or None."""
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    for turn in turns:
        content = turn.get("content")
        if turn.get("role") == "user" and isinstance(content, str):
            if content.strip() not in rendered:
                return content
    return None


def save_char_tokenizer_as_hf(tokenizer: CharTokenizer, directory: str | Path) -> Path:
    """Write astrai's character tokenizer as a Hugging Face tokenizer with the same ids.

    A BPE model without merges splits text into single characters; ``<bos>`` is prepended by a
    template post-processor (as ``CharTokenizer.encode`` does); the ``Fuse`` decoder joins
    characters without spaces.
    """
    from tokenizers import Tokenizer, decoders, processors
    from tokenizers.models import BPE

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({c: i + len(SPECIAL_TOKENS) for i, c in enumerate(tokenizer.alphabet)})
    hf = Tokenizer(BPE(vocab=vocab, merges=[]))
    hf.add_special_tokens(list(SPECIAL_TOKENS))
    hf.decoder = decoders.Fuse()
    hf.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", tokenizer.bos_id)]
    )
    directory = Path(directory)
    with naming_write_errors(directory / TOKENIZER_FILE):
        hf.save(str(directory / TOKENIZER_FILE))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "add_bos_token": True,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1_000_000,
    }
    with naming_write_errors(directory / TOKENIZER_CONFIG_FILE):
        (directory / TOKENIZER_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return directory / TOKENIZER_FILE
