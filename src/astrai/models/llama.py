"""A Llama-style decoder-only language model with a KV cache.

RoPE, RMSNorm, SwiGLU MLP and grouped-query attention, as in Llama 2/3, with the named
variations of the families astrai supports (``models.families``: Qwen2's q/k/v biases, Qwen3's
per-head q/k RMSNorm, a ``head_dim`` of its own, RoPE scaling from ``models.rope``). Parameter
names follow
Hugging Face's ``LlamaForCausalLM`` (``model.embed_tokens``, ``model.layers.N.self_attn.q_proj``,
..., ``model.norm``, ``lm_head``) so HF checkpoints load and export without renaming.

Position ids come from the attention mask (``cumsum(mask) - 1``), so a left-padded row scores
exactly like the same row without padding.

Sampling runs one-token steps with a KV cache; on CPU in float32 without autograd the sampler
takes a fast path for them (``astrai.models.decode``): the same math in fewer, cheaper ops,
because at small model sizes a decoding step costs mostly per-op overhead. ``forward`` is the
reference it is tested against.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from astrai.models.attention_mask import attention_mask_for
from astrai.models.families import FAMILIES, describe, family_with
from astrai.models.kv_cache import KVCache
from astrai.models.rope import RotaryEmbedding, apply_rotary, normalize_rope_scaling


@dataclass
class LlamaConfig:
    """Model hyperparameters, named like Hugging Face ``LlamaConfig``. The defaults are the
    ``model=tiny`` preset (``conf/model/tiny.yaml``; a test keeps them equal); every preset
    sets every field, so in a composed job no default applies."""

    vocab_size: int = 48
    hidden_size: int = 64
    intermediate_size: int = 256
    num_hidden_layers: int = 1
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 64
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02
    attention_bias: bool = False
    # issue 33's fields: a None is resolved in __post_init__ (head_dim = hidden / heads, the
    # model_type the switches name); checkpoints written before them load with these defaults
    head_dim: int | None = None
    qk_norm: bool = False  # per-head RMSNorm on q and k before RoPE (Qwen3)
    rope_scaling: dict[str, Any] | None = None  # models.rope: rope_type and its keys
    model_type: str | None = None  # models.families: what an export declares

    def __post_init__(self) -> None:
        positive = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
        )
        for key in positive:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"model.{key} must be a positive integer (got {value!r})")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"model.hidden_size ({self.hidden_size}) must be divisible by "
                    f"model.num_attention_heads ({self.num_attention_heads}), or set "
                    "model.head_dim"
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        head_dim = self.head_dim
        if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0:
            raise ValueError(f"model.head_dim must be a positive integer (got {head_dim!r})")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"model.num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"model.num_key_value_heads ({self.num_key_value_heads})"
            )
        if head_dim % 2:
            raise ValueError(f"model.head_dim ({head_dim}) must be even for RoPE")
        self._check_family()
        try:
            self.rope_scaling = normalize_rope_scaling(self.rope_scaling)
        except ValueError as err:
            raise ValueError(f"model.rope_scaling: {err}") from err
        for key in ("rope_theta", "rms_norm_eps", "initializer_range"):
            value = getattr(self, key)
            # ``not value > 0`` (not ``value <= 0``): NaN compares False both ways
            finite = isinstance(value, int | float) and not isinstance(value, bool)
            if not (finite and math.isfinite(value) and value > 0):
                raise ValueError(f"model.{key} must be a finite number > 0 (got {value!r})")

    def _check_family(self) -> None:
        """``model_type`` resolved from the switches, or checked against them."""
        for key in ("attention_bias", "qk_norm", "tie_word_embeddings"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"model.{key} must be true or false (got {getattr(self, key)!r})")
        if self.model_type is None:
            self.model_type = family_with(self.attention_bias, self.qk_norm).model_type
            return
        family = FAMILIES.get(self.model_type)
        if family is None:
            raise ValueError(
                f"model.model_type {self.model_type!r} is not supported (supported: "
                f"{', '.join(FAMILIES)})"
            )
        if (family.attention_bias, family.qk_norm) != (self.attention_bias, self.qk_norm):
            raise ValueError(
                f"model.model_type {self.model_type!r} is {describe(family)}, but the config "
                f"says attention_bias={self.attention_bias}, qk_norm={self.qk_norm}"
            )

    @property
    def dim_per_head(self) -> int:
        """``head_dim`` as an int (resolved in ``__post_init__``; typed for mypy)."""
        assert self.head_dim is not None
        return self.head_dim

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CausalLMOutput:
    """Forward result: ``logits [N, T, V]``, final-norm ``hidden_states [N, T, H]``, the cache."""

    logits: Tensor
    hidden_states: Tensor
    cache: KVCache | None = None


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """``[N, S]`` bool mask -> ``[N, S]`` positions counting only valid tokens (pads get 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.dim_per_head
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)
        # Qwen3: each head's q and k RMS-normalized (one weight per head dimension) before RoPE
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        attn_mask: Tensor | None,
        cache: KVCache | None,
    ) -> Tensor:
        """``x [N, T, H]``, ``attn_mask [N, 1, T, S]`` (True = may attend; None: causal, no
        cache) -> ``[N, T, H]``."""
        n, t, _ = x.shape
        q = self.q_proj(x).view(n, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(n, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(n, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=attn_mask is None,
            enable_gqa=self.num_heads != self.num_kv_heads,
        )  # fmt: skip
        return self.o_proj(out.transpose(1, 2).reshape(n, t, self.num_heads * self.head_dim))


class LlamaMLP(nn.Module):
    """SwiGLU feed-forward (Shazeer 2020): ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, attn_mask: Tensor | None, cache: KVCache | None
    ) -> Tensor:
        """``attn_mask``: bool ``[N, 1, T, S]``, or None (causal)."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attn_mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    """The trunk: embeddings, decoder layers, final norm (no LM head).

    ``gradient_checkpointing`` (off by default; ``set_gradient_checkpointing``): in training mode
    with autograd on, each decoder layer keeps only its input and recomputes its activations in
    the backward pass — activation memory of one layer instead of all, for a second forward.
    """

    gradient_checkpointing: bool = False

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(
            config.dim_per_head,
            config.rope_theta,
            config.rope_scaling,
            config.max_position_embeddings,
        )

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Run the trunk.

        Args:
            input_ids: ``[N, T]`` new tokens.
            attention_mask: ``[N, S]`` bool over cached + new tokens (``S = past + T``); every
                token when omitted.
            position_ids: ``[N, T]``; derived from ``attention_mask`` when omitted.
            cache: filled in place with the new keys/values when given.

        Returns:
            ``[N, T, H]`` hidden states after the final norm.
        """
        n, t = input_ids.shape
        if attention_mask is None:
            past = cache.length if cache is not None else 0
            attention_mask = torch.ones(n, past + t, dtype=torch.bool, device=input_ids.device)
        s = attention_mask.shape[1]
        past = s - t
        if position_ids is None:  # from the mask: below s, the table's bound
            position_ids = position_ids_from_mask(attention_mask)[:, past:]
            cos, sin = self.rotary_emb(position_ids, max_position=s)
        else:
            cos, sin = self.rotary_emb(position_ids)
        attn_mask = attention_mask_for(attention_mask, t)  # None: causal (models.attention_mask)
        x = self.embed_tokens(input_ids)
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for layer in self.layers:
            if recompute and cache is None:
                x = checkpoint(layer, x, cos, sin, attn_mask, None, use_reentrant=False)
            else:
                x = layer(x, cos, sin, attn_mask, cache)
        if cache is not None:
            cache.advance(t)
        return self.norm(x)


def init_weights(module: nn.Module, std: float) -> None:
    """normal(0, std) for Linear/Embedding weights, zero biases (as HF Llama). PyTorch's default
    N(0, 1) embedding init with tied weights makes a fresh model copy its input token, which
    gives RL no signal."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class LlamaForCausalLM(nn.Module):
    """Trunk + LM head. ``forward`` returns logits and final hidden states."""

    # the Hugging Face directory its weights were loaded from (``models.pretrained``), which an
    # engine with its own weights may start from; None: built from a config
    source_dir: str | None = None

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.apply(partial(init_weights, std=config.initializer_range))
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: KVCache | None = None,
        logits_from: int | None = None,
        logits_at: Tensor | None = None,
    ) -> CausalLMOutput:
        """``input_ids [N, T]``, ``attention_mask [N, past + T]`` bool (every token when
        omitted) -> logits ``[N, T, V]``, or ``[N, T - logits_from, V]`` of the positions from
        ``logits_from`` on, or ``[N, K, V]`` at the positions ``logits_at [N, K]`` of each row:
        the LM head runs only where its logits are used (a sampler's prompt pass needs the last
        position, scoring the response positions; at a 150k vocabulary the logits of a 1k-token
        prompt are 300 MB a row in bf16)."""
        hidden = self.model(input_ids, attention_mask, position_ids, cache)
        kept = hidden if logits_from is None else hidden[:, logits_from:]
        if logits_at is not None:
            kept = hidden.gather(1, logits_at[..., None].expand(-1, -1, hidden.shape[-1]))
        return CausalLMOutput(logits=self.lm_head(kept), hidden_states=hidden, cache=cache)

    def new_cache(
        self, batch_size: int, max_length: int, dtype: torch.dtype | None = None
    ) -> KVCache:
        """An empty KV cache for ``batch_size`` rows of up to ``max_length`` tokens, in
        ``dtype`` (None: the weights'; ``models.precision.compute_dtype`` gives a run's)."""
        return new_cache(self.config, self.lm_head.weight, batch_size, max_length, dtype)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def new_cache(
    config: LlamaConfig,
    like: Tensor,
    batch_size: int,
    max_length: int,
    dtype: torch.dtype | None = None,
) -> KVCache:
    """An empty KV cache for a trunk of ``config`` whose weights are like ``like`` (device, and
    dtype unless ``dtype`` is given: a bf16 run's caches are bfloat16, told by the caller, never
    read from torch's ambient autocast state): ``batch_size`` rows of up to ``max_length``
    tokens."""
    return KVCache(
        num_layers=config.num_hidden_layers,
        batch_size=batch_size,
        num_kv_heads=config.num_key_value_heads,
        max_length=max_length,
        head_dim=config.dim_per_head,
        dtype=like.dtype if dtype is None else dtype,
        device=like.device,
    )


def set_gradient_checkpointing(model: nn.Module, enabled: bool) -> None:
    """Turn activation recomputation on or off in every trunk of ``model`` (policy or critic)."""
    for module in model.modules():
        if isinstance(module, LlamaModel):
            module.gradient_checkpointing = enabled


def build_llama(*, gradient_checkpointing: bool, **kwargs: object) -> LlamaForCausalLM:
    """Hydra target: ``model`` config keys (HF ``LlamaConfig`` names, plus
    ``gradient_checkpointing``) -> a fresh model."""
    model = LlamaForCausalLM(LlamaConfig(**kwargs))  # type: ignore[arg-type]
    set_gradient_checkpointing(model, gradient_checkpointing)
    return model
