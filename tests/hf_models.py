"""Tiny random Hugging Face checkpoints built locally with ``transformers`` (the ``hf`` extra):
what a user's ``model.path`` directory looks like, with the character tokenizer's HF form."""

from __future__ import annotations

from pathlib import Path

import torch

from astrai.models.hf_tokenizer import save_char_tokenizer_as_hf
from astrai.models.tokenizer import CharTokenizer

TINY = {
    "vocab_size": 48,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


def save_tiny_hf_model(
    directory: Path, family: str = "llama", tied: bool = True, seed: int = 0
) -> Path:
    """``save_pretrained`` of a random ``LlamaForCausalLM`` or ``Qwen2ForCausalLM`` (biases
    drawn non-zero, so a dropped bias shows) plus the character tokenizer files."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    kwargs = dict(TINY, tie_word_embeddings=tied, initializer_range=0.2, rope_theta=5e5)
    if family == "llama":
        model = LlamaForCausalLM(LlamaConfig(**kwargs))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**kwargs))
    return save_with_char_tokenizer(model, directory)


def save_with_char_tokenizer(model: torch.nn.Module, directory: Path) -> Path:
    """``save_pretrained`` of a random transformers ``model`` (any biases drawn non-zero, so a
    dropped bias shows) plus the character tokenizer files."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.5)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(directory))
    save_char_tokenizer_as_hf(CharTokenizer(), directory)
    return directory


def copy_with_added_token(source: Path, directory: Path, token: str = "abc") -> Path:
    """A copy of the model directory ``source`` whose ``tokenizer.json`` has ``token`` added
    (id = the old vocabulary size) and whose model was not resized: the tokenizer can produce an
    id the embedding has no row for."""
    import shutil

    from tokenizers import Tokenizer

    shutil.copytree(source, directory)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.add_tokens([token])
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory
