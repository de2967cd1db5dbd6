"""The model families astrai's one decoder block computes, as named variations of it.

Like transformers' "modular" model files, each family is Llama's block with a few switches
rather than a copy of the code: ``attention_bias`` (biases on q/k/v, Qwen2) and ``qk_norm``
(a per-head RMSNorm on q and k before RoPE, Qwen3). Everything else a family may differ in
(``head_dim``, RoPE scaling, tied embeddings) is a ``LlamaConfig`` field of its own that any
family may set. ``mistral`` is ``llama``'s block under another name (its sliding window is not
supported: ``models.hf_config`` refuses one that could mask anything).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    """One ``model_type``: the block's switches and transformers' class-name prefix."""

    model_type: str
    attention_bias: bool
    qk_norm: bool
    class_prefix: str  # transformers' ``<prefix>ForCausalLM`` / ``ForTokenClassification`` ...

    def architecture(self, head: str) -> str:
        """transformers' class of this family with ``head`` (``ForCausalLM``, ...)."""
        return f"{self.class_prefix}{head}"


FAMILIES: dict[str, Family] = {
    family.model_type: family
    for family in (
        Family("llama", attention_bias=False, qk_norm=False, class_prefix="Llama"),
        Family("mistral", attention_bias=False, qk_norm=False, class_prefix="Mistral"),
        Family("qwen2", attention_bias=True, qk_norm=False, class_prefix="Qwen2"),
        Family("qwen3", attention_bias=False, qk_norm=True, class_prefix="Qwen3"),
    )
}


def family_with(attention_bias: bool, qk_norm: bool) -> Family:
    """The first family with these switches (``llama`` before ``mistral``): what a config that
    names none (a preset, a checkpoint written before ``model_type`` was a field) is."""
    for family in FAMILIES.values():
        if (family.attention_bias, family.qk_norm) == (attention_bias, qk_norm):
            return family
    raise ValueError(
        f"no supported model family has attention_bias={attention_bias} and qk_norm={qk_norm} "
        f"(supported: {', '.join(f'{f.model_type} {describe(f)}' for f in FAMILIES.values())})"
    )


def describe(family: Family) -> str:
    """``(attention_bias=..., qk_norm=...)`` of a family, for error messages."""
    return f"(attention_bias={family.attention_bias}, qk_norm={family.qk_norm})"


def implied_by_older_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The values of the fields issue 33 added (``head_dim``, ``qk_norm``, ``rope_scaling``,
    ``model_type``) that a model config written before them meant: a run fingerprinted then
    resumes when the new fields hold exactly these."""
    heads = fields.get("num_attention_heads") or 1
    return {
        "head_dim": (fields.get("hidden_size") or 0) // heads,
        "qk_norm": False,
        "rope_scaling": None,
        "model_type": family_with(bool(fields.get("attention_bias")), False).model_type,
    }
