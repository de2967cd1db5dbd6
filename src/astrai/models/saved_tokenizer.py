"""The tokenizer a model directory holds, whichever kind: astrai's character tokenizer or a
Hugging Face ``tokenizer.json``. Above both tokenizer modules, so neither imports the other's
loader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from astrai.models.hf_tokenizer import HFTokenizer
from astrai.models.tokenizer import TOKENIZER_FILE, CharTokenizer, Tokenizer


def load_tokenizer(
    directory: str | Path,
    chat_template: bool = True,
    template_kwargs: dict[str, Any] | None = None,
) -> Tokenizer:
    """The tokenizer saved in ``directory``: astrai's character tokenizer (``"type": "char"``)
    or a Hugging Face ``tokenizer.json`` (with ``tokenizer_config.json`` and chat template).

    ``chat_template``: render prompts through the Hugging Face chat template when there is one;
    ``template_kwargs``: extra template variables (``model.chat_template_kwargs``).
    """
    path = Path(directory) / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    try:
        kind = json.loads(path.read_text()).get("type")
    except (json.JSONDecodeError, AttributeError) as err:
        raise ValueError(f"invalid tokenizer file {path}: {err}") from err
    if kind == "char":
        return CharTokenizer.load(directory)
    return HFTokenizer.load(directory, chat_template, template_kwargs)
