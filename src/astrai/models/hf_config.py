"""Hugging Face ``config.json`` <-> astrai ``LlamaConfig``.

Supported families (``models.families``): ``llama`` (Llama 2 and 3.x, SmolLM, TinyLlama, ...),
``mistral`` (without a sliding window), ``qwen2`` (q/k/v biases) and ``qwen3`` (per-head q/k
RMSNorm), each with its ``head_dim``, tied or untied embeddings and RoPE scaling (``default``,
``linear``, ``llama3``, ``yarn``: ``models.rope``). Every key of a checkpoint's config is either
read, checked to hold a value astrai computes exactly (``hidden_act: silu``, no dropout, a
sliding window that cannot mask anything, ...), or metadata that does not change the model; any
other key or value is refused with the key named, never ignored. Every key read has one JSON type
(``READ_KEY_TYPES``), checked before any value is used: ``"tie_word_embeddings": "false"`` (a
string, which ``bool()`` reads as true) or ``"num_attention_heads": [2]`` is refused, not coerced.

Export writes a config both transformers 5 (``rope_parameters``) and 4.x / vLLM
(``rope_theta`` + ``rope_scaling``) read, in the family's own layout (``architectures``,
``model_type``). The PPO critic is exported as ``*ForTokenClassification`` with one label: the
trunk plus a ``score`` Linear with bias, i.e. ``V`` at every position.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from astrai.models.families import FAMILIES
from astrai.models.llama import LlamaConfig
from astrai.models.rope import RopeScalingError, normalize_rope_scaling

SUPPORTED_MODEL_TYPES = tuple(FAMILIES)
HEADS = {"causal_lm": "ForCausalLM", "value": "ForTokenClassification"}

# keys that describe the file, the tokenizer or generation defaults, never the model's math
METADATA_KEYS = frozenset(
    {
        "_name_or_path", "name_or_path", "architectures", "model_type", "transformers_version",
        "torch_dtype", "dtype", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
        "sep_token_id", "decoder_start_token_id", "tokenizer_class", "id2label", "label2id",
        "problem_type", "classifier_dropout", "num_labels", "output_attentions",
        "output_hidden_states", "return_dict", "torchscript", "use_return_dict",
        "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention",
        "tie_encoder_decoder", "finetuning_task", "prefix", "task_specific_params",
        "max_length", "min_length", "do_sample", "temperature", "top_k", "top_p", "num_beams",
        "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "early_stopping",
        "num_return_sequences", "bad_words_ids", "pruned_heads", "tf_legacy_loss",
        "use_bfloat16", "transformers.js_config", "is_llama_config",
        # the split of a matmul over tensor-parallel slices in Llama's pretraining: the same math
        "pretraining_tp",
        # which layers a Qwen sliding window would cover: checked with the window itself
        "max_window_layers",
    }
)  # fmt: skip
# keys astrai reads into LlamaConfig, each with the JSON type it must have (checked by
# ``_check_types`` before any value is used: ``bool("false")`` is True, ``int([2])`` a TypeError)
INT, OPTIONAL_INT, NUMBER, BOOL, OPTIONAL_MAP = (
    "a positive integer",
    "null or a positive integer",
    "a finite number > 0",
    "true or false",
    "null or a JSON object",
)
READ_KEY_TYPES: dict[str, str] = {
    "vocab_size": INT,
    "hidden_size": INT,
    "intermediate_size": INT,
    "num_hidden_layers": INT,
    "num_attention_heads": INT,
    "num_key_value_heads": OPTIONAL_INT,
    "max_position_embeddings": INT,
    "head_dim": OPTIONAL_INT,
    "rope_theta": NUMBER,
    "rope_scaling": OPTIONAL_MAP,
    "rope_parameters": OPTIONAL_MAP,
    "rms_norm_eps": NUMBER,
    "tie_word_embeddings": BOOL,
    "initializer_range": NUMBER,
    "attention_bias": BOOL,
}
READ_KEYS = frozenset(READ_KEY_TYPES)
REQUIRED_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                 "num_attention_heads")  # fmt: skip


def _has_type(value: Any, kind: str) -> bool:
    """Whether a JSON ``value`` is of ``kind`` (one of ``READ_KEY_TYPES``' values)."""
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == OPTIONAL_MAP:
        return value is None or isinstance(value, dict)
    if kind == OPTIONAL_INT and value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if kind == NUMBER:  # ``not value > 0`` (not ``<= 0``): NaN compares False both ways
        return math.isfinite(value) and value > 0
    return isinstance(value, int) and value > 0  # INT, OPTIONAL_INT: 1e6 is a float in JSON


def _check_types(hf: dict[str, Any]) -> None:
    """Every key astrai reads holds its ``READ_KEY_TYPES`` type (an absent optional key takes
    its default); the first that does not is named with its value."""
    for key in REQUIRED_KEYS:
        if key not in hf:
            raise UnsupportedModelError(f"missing key {key!r}")
    for key, kind in READ_KEY_TYPES.items():
        if key in hf and not _has_type(hf[key], kind):
            raise UnsupportedModelError(f"{key} must be {kind} (got {hf[key]!r})")


class UnsupportedModelError(ValueError):
    """A checkpoint astrai's Llama block cannot represent exactly; names the key."""


def _is_off(value: Any) -> bool:
    return value in (None, False, 0, 0.0)


# keys astrai honours by checking their value: key -> (accepts(value, hf), what is supported)
CHECKED_KEYS: dict[str, tuple[Callable[[Any, dict[str, Any]], bool], str]] = {
    "hidden_act": (lambda v, hf: v == "silu", "silu"),
    "mlp_bias": (lambda v, hf: _is_off(v), "false"),
    "attention_dropout": (lambda v, hf: _is_off(v), "0 (astrai has no dropout)"),
    "rope_interleaved": (lambda v, hf: _is_off(v), "false (HF's rotate_half layout)"),
    "partial_rotary_factor": (lambda v, hf: v in (None, 1, 1.0), "1.0 (RoPE on every dimension)"),
    # Qwen2-VL's multimodal RoPE; text checkpoints derived from Qwen2.5 carry it switched off
    "use_mrope": (lambda v, hf: _is_off(v), "false"),
    "sliding_window": (
        lambda v, hf: not _window_binds(v, hf),
        "null, or at least max_position_embeddings (a window that masks nothing)",
    ),
    "use_sliding_window": (
        lambda v, hf: _is_off(v) or not _window_binds(hf.get("sliding_window"), hf),
        "false",
    ),
    "layer_types": (
        lambda v, hf: (
            isinstance(v, list)
            and all(
                t == "full_attention" or not _window_binds(hf.get("sliding_window"), hf) for t in v
            )
        ),
        "full_attention in every layer",
    ),
}


def _window_binds(window: Any, hf: dict[str, Any]) -> bool:
    """Whether a sliding window of ``window`` tokens could mask a key the full causal mask
    keeps: only below ``max_position_embeddings``, and for Qwen only with
    ``use_sliding_window`` (transformers' Qwen2/Qwen3 configs drop the window without it)."""
    if window is None:
        return False
    if hf.get("model_type") in ("qwen2", "qwen3") and _is_off(hf.get("use_sliding_window")):
        return False
    if not isinstance(window, int) or isinstance(window, bool):
        return True
    return window < int(hf.get("max_position_embeddings", 2048))


def _is_metadata(key: str) -> bool:
    """Listed metadata, a private attribute transformers or a converter saved (``_commit_hash``,
    ``_model_name_or_path``), or a special token's id (``unk_token_id``, ...)."""
    return key in METADATA_KEYS or key.startswith("_") or key.endswith("_token_id")


def _check_keys(hf: dict[str, Any], model_type: str) -> None:
    """Every key read, metadata, or holding a value astrai computes exactly."""
    for key, value in hf.items():
        if key in READ_KEYS or _is_metadata(key):
            continue
        if key in CHECKED_KEYS:
            accepts, supported = CHECKED_KEYS[key]
            if not accepts(value, hf):
                raise UnsupportedModelError(
                    f"{key}={value!r} is not supported for model_type {model_type!r} "
                    f"(supported: {supported})"
                )
            continue
        raise UnsupportedModelError(
            f"key {key!r} (= {value!r}) is not one astrai honours for model_type "
            f"{model_type!r}; it refuses the model rather than ignore it"
        )


def _rope(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(RoPE base, scaling) from ``rope_parameters`` (transformers 5) and/or ``rope_theta`` +
    ``rope_scaling`` (4.x); refused where the two disagree."""
    params, scaling = hf.get("rope_parameters") or {}, hf.get("rope_scaling") or {}
    for key, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if not isinstance(value, dict) or any(isinstance(v, dict) for v in value.values()):
            raise UnsupportedModelError(
                f"{key}={value!r}: one global RoPE is supported, not one per layer type"
            )
    try:
        from_params, from_scaling = normalize_rope_scaling(params), normalize_rope_scaling(scaling)
    except RopeScalingError as err:
        raise UnsupportedModelError(str(err)) from err
    if params and scaling and from_params != from_scaling:
        raise UnsupportedModelError(
            f"rope_parameters {params!r} and rope_scaling {scaling!r} disagree"
        )
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    if not _has_type(theta, NUMBER):
        raise UnsupportedModelError(f"rope_parameters.rope_theta must be {NUMBER} (got {theta!r})")
    return float(theta), from_params if params else from_scaling


def llama_config_from_hf(hf: dict[str, Any]) -> LlamaConfig:
    """A Hugging Face ``config.json`` dict -> astrai ``LlamaConfig`` (or UnsupportedModelError)."""
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
        raise UnsupportedModelError(
            f"model_type {model_type!r} is not supported (supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    family = FAMILIES[model_type]
    _check_types(hf)
    if hf.get("attention_bias") and not family.attention_bias:
        raise UnsupportedModelError(
            f"attention_bias=true on a {model_type} model (biases on q/k/v *and* o_proj) is not "
            "supported; Qwen2-style q/k/v biases are (model_type qwen2)"
        )
    _check_keys(hf, model_type)
    theta, scaling = _rope(hf)
    heads = hf["num_attention_heads"]
    return LlamaConfig(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_hidden_layers=hf["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=hf.get("num_key_value_heads") or heads,
        max_position_embeddings=hf.get("max_position_embeddings", 2048),
        rope_theta=theta,
        rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
        tie_word_embeddings=hf.get("tie_word_embeddings", False),
        initializer_range=hf.get("initializer_range", 0.02),
        attention_bias=family.attention_bias,
        head_dim=hf.get("head_dim"),
        qk_norm=family.qk_norm,
        rope_scaling=scaling,
        model_type=model_type,
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
    assert config.model_type is not None  # resolved by LlamaConfig
    family = FAMILIES[config.model_type]
    rope_parameters = {"rope_type": "default", **(config.rope_scaling or {})}
    hf: dict[str, Any] = {
        "architectures": [family.architecture(HEADS[kind])],
        "model_type": family.model_type,
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
        "rope_scaling": config.rope_scaling,
        "rope_parameters": {**rope_parameters, "rope_theta": config.rope_theta},
        "tie_word_embeddings": config.tie_word_embeddings,
        "initializer_range": config.initializer_range,
        "attention_dropout": 0.0,
        "use_cache": True,
        "torch_dtype": dtype,
        "dtype": dtype,
    }
    if family.model_type == "llama":
        hf.update(attention_bias=False, mlp_bias=False)
    elif family.model_type == "qwen3":
        hf.update(attention_bias=False, use_sliding_window=False, sliding_window=None)
    elif family.model_type == "qwen2":
        hf.update(use_sliding_window=False, sliding_window=None)
    else:  # mistral: transformers' MistralConfig defaults to a 4096-token window
        hf.update(sliding_window=None)
    if kind == "value":
        hf.update(id2label={"0": "value"}, label2id={"value": 0}, classifier_dropout=0.0)
        hf["tie_word_embeddings"] = False  # the critic has no LM head to tie
    hf.update(special_ids or {})
    return hf
