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


# Llama 3.1/3.2's RoPE scaling, with an original context short enough that every branch of the
# rule (kept, blended, divided) covers some of the 8 frequency pairs of a 16-wide head
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
# what each tiny family differs in beside its transformers class: the features that family's
# real checkpoints carry (Qwen3: a head_dim that is not hidden / heads; Llama 3: RoPE scaling)
FAMILY_KWARGS: dict[str, dict[str, object]] = {
    "llama": {},
    "llama3": {"rope_parameters": {**LLAMA3_ROPE, "rope_theta": 5e5}},
    "qwen2": {},
    "qwen3": {"head_dim": 24},
    "mistral": {"sliding_window": None},
}
CLASS_PREFIX = {
    "llama": "Llama",
    "llama3": "Llama",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "mistral": "Mistral",
}


def save_tiny_hf_model(
    directory: Path, family: str = "llama", tied: bool = True, seed: int = 0
) -> Path:
    """``save_pretrained`` of a random transformers model of ``family`` (``FAMILY_KWARGS``; any
    biases and norm weights drawn away from their init, so a dropped one shows) plus the
    character tokenizer files."""
    import transformers

    torch.manual_seed(seed)
    kwargs = dict(TINY, tie_word_embeddings=tied, initializer_range=0.2, rope_theta=5e5)
    kwargs.update(FAMILY_KWARGS[family])
    prefix = CLASS_PREFIX[family]
    config = getattr(transformers, f"{prefix}Config")(**kwargs)
    model = getattr(transformers, f"{prefix}ForCausalLM")(config)
    return save_with_char_tokenizer(model, directory)


def save_with_char_tokenizer(model: torch.nn.Module, directory: Path) -> Path:
    """``save_pretrained`` of a random transformers ``model`` (any biases drawn non-zero, so a
    dropped bias shows) plus the character tokenizer files."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.5)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):  # init: all ones
                param.uniform_(0.5, 1.5)
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
