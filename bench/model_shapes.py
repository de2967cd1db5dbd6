"""The published ``config.json`` shapes of the models the benchmarks size against (the values
astrai reads; the weights are random in every bench): ``bench/scale_memory.py``'s memory
estimates, ``bench/mfu.py``'s update MFU, ``bench/gpu_check_engine.py``'s engine speed."""

from __future__ import annotations

from typing import Any

_COMMON = {"attention_dropout": 0.0, "hidden_act": "silu", "tie_word_embeddings": True}
MODELS: dict[str, dict[str, Any]] = {  # the published config.json values astrai reads
    "qwen3-0.6b": {
        **_COMMON,
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "attention_bias": False,
    },
    "llama-3.2-1b": {
        **_COMMON,
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "attention_bias": False,
        "mlp_bias": False,
    },
    "qwen2.5-1.5b": {
        **_COMMON,
        "model_type": "qwen2",
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "use_sliding_window": False,
    },
}
# Qwen3-1.7B: Qwen3-0.6B's config.json but for its widths
MODELS["qwen3-1.7b"] = {
    **MODELS["qwen3-0.6b"],
    "hidden_size": 2048,
    "intermediate_size": 6144,
}
