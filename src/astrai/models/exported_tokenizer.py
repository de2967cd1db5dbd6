"""The tokenizer side of an exported Hugging Face model directory (``models.pretrained``'s
``save_policy_dir`` / ``save_critic_dir``): the special-token ids its ``config.json`` declares,
its ``generation_config.json`` and its tokenizer files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from astrai.models.hf_tokenizer import HFTokenizer, save_char_tokenizer_as_hf
from astrai.models.tokenizer import CharTokenizer, Tokenizer


def special_token_ids(tokenizer: Tokenizer) -> dict[str, int | None]:
    """The ids an export declares: the tokenizer's own special tokens, None where it has none.
    ``HFTokenizer.bos_id`` / ``pad_id`` fall back to EOS for internal use only: exported, a
    Qwen2 model (no BOS) would claim ``<|im_end|>`` as its BOS."""
    if isinstance(tokenizer, HFTokenizer):
        return dict(tokenizer.special_token_ids)
    return {
        "bos_token_id": tokenizer.bos_id,
        "eos_token_id": tokenizer.eos_id,
        "pad_token_id": tokenizer.pad_id,
    }


def generation_config_for(tokenizer: Tokenizer) -> dict[str, Any]:
    """``generation_config.json``: the source model's own when the tokenizer carries it (its
    end-of-turn id list and sampling defaults win), else the special-token ids that exist."""
    ids = {k: v for k, v in special_token_ids(tokenizer).items() if v is not None}
    source = tokenizer.generation_config if isinstance(tokenizer, HFTokenizer) else None
    return {**ids, **(source or {})}


def save_tokenizer_files(tokenizer: Tokenizer, directory: Path) -> None:
    """Hugging Face tokenizer files: the model's own, or the character tokenizer's HF form."""
    if isinstance(tokenizer, CharTokenizer):
        save_char_tokenizer_as_hf(tokenizer, directory)
    else:
        tokenizer.save(directory)
