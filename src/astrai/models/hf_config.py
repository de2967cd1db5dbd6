"""Hugging Face ``config.json`` <-> astrai ``LlamaConfig``.

Supported families: ``llama`` (Llama 2/3 without RoPE scaling, SmolLM, TinyLlama, ...) and
``qwen2`` (the same block with q/k/v biases: astrai's ``attention_bias=True``). Anything astrai's
block cannot compute exactly — another activation, an MLP or o_proj bias, RoPE scaling, sliding
windows, a head_dim other than hidden/heads — is refused with the key named, never ignored.

Export writes a config both transformers 5 (``rope_parameters``) and 4.x / vLLM
(``rope_theta``) read: ``attention_bias=False`` as ``LlamaForCausalLM``, ``True`` as
``Qwen2ForCausalLM`` (transformers' Llama with ``attention_bias`` also puts a bias on o_proj,
astrai's and Qwen2's do not). The PPO critic is exported as ``*ForTokenClassification`` with
one label: the trunk plus a ``score`` Linear with bias, i.e. ``V`` at every position.
"""

from __future__ import annotations

from typing import Any

from astrai.models.llama import LlamaConfig

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")
ARCHITECTURES = {
    ("llama", "causal_lm"): "LlamaForCausalLM",
    ("qwen2", "causal_lm"): "Qwen2ForCausalLM",
    ("llama", "value"): "LlamaForTokenClassification",
    ("qwen2", "value"): "Qwen2ForTokenClassification",
}


class UnsupportedModelError(ValueError):
    """A checkpoint astrai's Llama block cannot represent exactly; names the key."""


def _rope_theta(hf: dict[str, Any]) -> float:
    """RoPE base from ``rope_parameters`` (transformers 5) or ``rope_theta`` + ``rope_scaling``
    (4.x); any scaling type but ``default`` is refused."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type")
    if rope_type not in (None, "default"):
        raise UnsupportedModelError(
            f"rope_type {rope_type!r} (RoPE scaling) is not supported; only default RoPE"
        )
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    return float(theta)


def llama_config_from_hf(hf: dict[str, Any]) -> LlamaConfig:
    """A Hugging Face ``config.json`` dict -> astrai ``LlamaConfig`` (or UnsupportedModelError)."""
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(
            f"model_type {model_type!r} is not supported (supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    if hf.get("hidden_act", "silu") != "silu":
        raise UnsupportedModelError(f"hidden_act {hf['hidden_act']!r} is not supported (silu)")
    if hf.get("mlp_bias"):
        raise UnsupportedModelError("mlp_bias=true is not supported")
    if model_type == "llama" and hf.get("attention_bias"):
        raise UnsupportedModelError(
            "attention_bias=true on a llama model (biases on q/k/v *and* o_proj) is not "
            "supported; Qwen2-style q/k/v biases are (model_type qwen2)"
        )
    if hf.get("use_sliding_window"):
        raise UnsupportedModelError("use_sliding_window=true is not supported")
    try:
        hidden, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
        kwargs: dict[str, Any] = {
            "vocab_size": int(hf["vocab_size"]),
            "hidden_size": hidden,
            "intermediate_size": int(hf["intermediate_size"]),
            "num_hidden_layers": int(hf["num_hidden_layers"]),
            "num_attention_heads": heads,
            "num_key_value_heads": int(hf.get("num_key_value_heads") or heads),
            "max_position_embeddings": int(hf.get("max_position_embeddings", 2048)),
        }
    except KeyError as err:
        raise UnsupportedModelError(f"missing key {err.args[0]!r}") from err
    head_dim = hf.get("head_dim")
    if head_dim is not None and heads and int(head_dim) != hidden // heads:
        raise UnsupportedModelError(
            f"head_dim {head_dim} differs from hidden_size / num_attention_heads "
            f"({hidden // heads}); not supported"
        )
    return LlamaConfig(
        **kwargs,
        rope_theta=_rope_theta(hf),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        initializer_range=float(hf.get("initializer_range", 0.02)),
        attention_bias=model_type == "qwen2",
    )


def hf_config_from_llama(
    config: LlamaConfig,
    kind: str = "causal_lm",
    dtype: str = "float32",
    special_ids: dict[str, int | None] | None = None,
) -> dict[str, Any]:
    """astrai ``LlamaConfig`` -> a ``config.json`` dict for transformers and vLLM.

    Args:
        kind: ``causal_lm`` (the policy) or ``value`` (the critic: token classification, one
            label).
        dtype: the stored weights' dtype name (``float32`` / ``bfloat16``).
        special_ids: ``bos_token_id`` / ``eos_token_id`` / ``pad_token_id`` from the tokenizer;
            None (no such token) is written as null, as transformers does: an absent key would
            read as ``LlamaConfig``'s default (``bos_token_id`` 1).
    """
    model_type = "qwen2" if config.attention_bias else "llama"
    hf: dict[str, Any] = {
        "architectures": [ARCHITECTURES[(model_type, kind)]],
        "model_type": model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": config.head_dim,
        "max_position_embeddings": config.max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "tie_word_embeddings": config.tie_word_embeddings,
        "initializer_range": config.initializer_range,
        "attention_dropout": 0.0,
        "use_cache": True,
        "torch_dtype": dtype,
        "dtype": dtype,
    }
    if model_type == "llama":
        hf.update(attention_bias=False, mlp_bias=False)
    else:
        hf.update(use_sliding_window=False, sliding_window=None)
    if kind == "value":
        hf.update(id2label={"0": "value"}, label2id={"value": 0}, classifier_dropout=0.0)
        hf["tie_word_embeddings"] = False  # the critic has no LM head to tie
    hf.update(special_ids or {})
    return hf
