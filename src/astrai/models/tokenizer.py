"""The tokenizer interface astrai's rollout needs, and the character-level tokenizer of the
embedded tasks (``<pad>``, ``<bos>``, ``<eos>``, saved as one JSON file).

Padding is expressed by masks everywhere in astrai; the pad id only fills unused slots.
Pretrained models bring their own tokenizer (``astrai.models.hf_tokenizer.HFTokenizer``);
``load_tokenizer`` tells the two apart by the saved file.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Protocol

from astrai.chat import Prompt
from astrai.files import naming_write_errors

TOKENIZER_FILE = "tokenizer.json"
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")
# digits, lowercase letters and a few symbols: 45 characters + 3 specials = 48 ids.
DEFAULT_ALPHABET = string.digits + string.ascii_lowercase + " +-*=:,.?"


class Tokenizer(Protocol):
    """What sampling, scoring and evaluation use from a tokenizer."""

    pad_id: int
    bos_id: int
    eos_id: int

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """The ids that end a response: ``eos_id`` first, then any other end-of-turn id the
        model declares (``generation_config.json``'s ``eos_token_id`` list)."""
        ...

    @property
    def vocab_size(self) -> int: ...

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """A task prompt -> the ids the policy is conditioned on (BOS / chat template included)."""
        ...

    def decode(self, ids: list[int]) -> str:
        """Response ids -> the text a reward function sees (special tokens dropped)."""
        ...

    def save(self, directory: str | Path) -> Path:
        """Write the tokenizer file(s) into ``directory``; return the ``tokenizer.json`` path."""
        ...


class CharTokenizer:
    """Maps each character of ``alphabet`` to one id; specials come first (0, 1, 2)."""

    def __init__(self, alphabet: str = DEFAULT_ALPHABET) -> None:
        if len(set(alphabet)) != len(alphabet):
            raise ValueError(f"tokenizer alphabet has repeated characters: {alphabet!r}")
        self.alphabet = alphabet
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
        offset = len(SPECIAL_TOKENS)
        self._char_to_id = {c: i + offset for i, c in enumerate(alphabet)}
        self._id_to_char = {i + offset: c for i, c in enumerate(alphabet)}

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return (self.eos_id,)

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.alphabet)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """``text`` -> ids, with ``<bos>`` first when ``add_bos``."""
        ids = [self.bos_id] if add_bos else []
        for char in text:
            if char not in self._char_to_id:
                raise ValueError(f"character {char!r} of {text!r} is not in the tokenizer alphabet")
            ids.append(self._char_to_id[char])
        return ids

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """``<bos>`` + the prompt's characters (a string: there is no chat template)."""
        if not isinstance(prompt, str):
            raise ValueError("chat messages need a tokenizer with a chat template")
        return self.encode(prompt, add_bos=True)

    def token_text(self, token_id: int) -> str | None:
        """The text of one token of the vocabulary (a special token's name too), None if
        none (as ``HFTokenizer.token_text``)."""
        if 0 <= token_id < len(SPECIAL_TOKENS):
            return SPECIAL_TOKENS[token_id]
        return self._id_to_char.get(token_id)

    def decode(self, ids: list[int]) -> str:
        """ids -> text; special tokens are dropped, decoding stops at nothing (masks decide)."""
        return "".join(self._id_to_char.get(i, "") for i in ids)

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / TOKENIZER_FILE
        payload = {
            "type": "char",
            "alphabet": self.alphabet,
            "special_tokens": list(SPECIAL_TOKENS),
        }
        with naming_write_errors(path):
            path.write_text(json.dumps(payload, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> CharTokenizer:
        path = Path(directory) / TOKENIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file not found: {path}")
        try:
            payload = json.loads(path.read_text())
            if payload.get("type") != "char":
                raise ValueError(f"unsupported tokenizer type {payload.get('type')!r}")
            return cls(payload["alphabet"])
        except (json.JSONDecodeError, KeyError, ValueError) as err:
            raise ValueError(f"invalid tokenizer file {path}: {err}") from err
