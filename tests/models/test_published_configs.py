"""The ``config.json`` files of checkpoints users start from, as published (written out here
from their public model cards' files; no download): every key astrai meets in them is read,
checked or known metadata, so none of these is turned away at start — and the one that needs
what astrai lacks (Mistral 7B v0.1's 4096-token sliding window) is refused naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from astrai.models.hf_config import UnsupportedModelError, llama_config_from_hf

QWEN3_0_6B = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
LLAMA_3_2_1B_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}
MISTRAL_7B_INSTRUCT_V0_3 = {
    "architectures": ["MistralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.42.0.dev0",
    "use_cache": True,
    "vocab_size": 32768,
}
QWEN2_5_0_5B_INSTRUCT = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 21,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
DEEPSEEK_R1_DISTILL_QWEN_1_5B = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 1536,
    "initializer_range": 0.02,
    "intermediate_size": 8960,
    "max_position_embeddings": 131072,
    "max_window_layers": 21,
    "model_type": "qwen2",
    "num_attention_heads": 12,
    "num_hidden_layers": 28,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.44.0",
    "use_cache": True,
    "use_mrope": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
SMOLLM2_135M_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 576,
    "initializer_range": 0.041666666666666664,
    "intermediate_size": 1536,
    "is_llama_config": True,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "pad_token_id": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_interleaved": False,
    "rope_scaling": None,
    "rope_theta": 100000,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.42.3",
    "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}},
    "use_cache": True,
    "vocab_size": 49152,
}
TINYLLAMA_1_1B_CHAT = {
    "_name_or_path": "/data/tinyllama", "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 2048,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22,
    "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.35.0", "use_cache": True, "vocab_size": 32000,
}  # fmt: skip


@pytest.mark.parametrize(
    ("config", "model_type", "head_dim", "rope_type"),
    [
        (QWEN3_0_6B, "qwen3", 128, None),
        (LLAMA_3_2_1B_INSTRUCT, "llama", 64, "llama3"),
        (MISTRAL_7B_INSTRUCT_V0_3, "mistral", 128, None),
        (QWEN2_5_0_5B_INSTRUCT, "qwen2", 64, None),
        (DEEPSEEK_R1_DISTILL_QWEN_1_5B, "qwen2", 128, None),
        (SMOLLM2_135M_INSTRUCT, "llama", 64, None),
        (TINYLLAMA_1_1B_CHAT, "llama", 64, None),
    ],
    ids=["qwen3-0.6b", "llama-3.2-1b", "mistral-7b-v0.3", "qwen2.5-0.5b", "r1-distill-1.5b",
         "smollm2-135m", "tinyllama-1.1b"],
)  # fmt: skip
def test_published_configs_are_read(
    config: dict[str, Any], model_type: str, head_dim: int, rope_type: str | None
) -> None:
    ours = llama_config_from_hf(config)
    assert (ours.model_type, ours.head_dim) == (model_type, head_dim)
    assert ours.qk_norm == (model_type == "qwen3")
    assert ours.attention_bias == (model_type == "qwen2")
    assert ours.tie_word_embeddings == config["tie_word_embeddings"]
    assert (ours.rope_scaling or {}).get("rope_type") == rope_type
    assert ours.rope_theta == float(config["rope_theta"])


def test_mistral_7b_v0_1s_sliding_window_is_refused() -> None:
    v0_1 = {**MISTRAL_7B_INSTRUCT_V0_3, "sliding_window": 4096, "rope_theta": 10000.0}
    with pytest.raises(UnsupportedModelError, match="sliding_window=4096 is not supported"):
        llama_config_from_hf(v0_1)


def test_a_qwen_window_counts_only_when_switched_on() -> None:
    on = {**DEEPSEEK_R1_DISTILL_QWEN_1_5B, "use_sliding_window": True}
    with pytest.raises(UnsupportedModelError, match="sliding_window=4096 is not supported"):
        llama_config_from_hf(on)
