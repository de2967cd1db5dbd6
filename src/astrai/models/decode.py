"""The fast path for one-token decoding steps: ``LlamaModel.forward`` with a KV cache, on CPU
in float32 without autograd, in fewer and cheaper ops.

At small model sizes a decoding step costs mostly per-op overhead, so this path packs the q/k/v
projections into one matmul, looks RoPE up in a per-cache table, computes attention as two
batched matmuls over the key/value head groups (cheaper on CPU than SDPA at one query per row),
builds one additive mask per step for every layer and overwrites intermediates in place. The
same math as ``forward`` up to float rounding in the attention; tests compare the two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from astrai.models.kv_cache import KVCache

if TYPE_CHECKING:
    from astrai.models.llama import (
        LlamaAttention,
        LlamaDecoderLayer,
        LlamaModel,
        RotaryEmbedding,
    )


def can_decode_step(model: LlamaModel, input_ids: Tensor, cache: KVCache | None) -> bool:
    """Whether ``decode_step`` may run this forward: one new token per row with a cache, no
    autograd (its packed weights live across steps), CPU (on GPU, SDPA's fused kernels are
    the fast path) and float32 (its attention would accumulate in a lower precision)."""
    return (
        input_ids.shape[1] == 1
        and cache is not None
        and not torch.is_grad_enabled()
        and input_ids.device.type == "cpu"
        and model.norm.weight.dtype == torch.float32
    )


def decode_step(
    model: LlamaModel,
    input_ids: Tensor,
    attention_mask: Tensor,
    position_ids: Tensor | None,
    cache: KVCache,
) -> Tensor:
    """``LlamaModel.forward`` where ``can_decode_step`` (``input_ids [N, 1]``): the same result
    up to float rounding in the attention, in fewer and cheaper ops."""
    s = attention_mask.shape[1]
    if s != cache.length + 1:
        raise ValueError(f"attention_mask covers {s} tokens, the cache {cache.length} + 1")
    if s > cache.max_length:
        raise ValueError(f"KV cache overflow: {s} tokens > max_length {cache.max_length}")
    if position_ids is None:
        # the last column of position_ids_from_mask, without its cumsum over all of S; the
        # positions are below S <= the cache length, so they index the cache's RoPE table
        position_ids = (attention_mask.sum(-1, keepdim=True) - 1).clamp_min(0)
        cos, signed_sin = rope_table_lookup(model.rotary_emb, position_ids, cache)
    else:
        cos, sin = model.rotary_emb(position_ids)
        signed_sin = signed_sin_of(sin)
    # Reading a cache slice with gaps between rows is 2-3x slower on CPU than reading the
    # whole (contiguous) buffer; once the filled part is at least half of it, attend over the
    # whole buffer and mask the unfilled slots.
    width = cache.max_length if 2 * s >= cache.max_length else s
    attn_bias = decode_bias(attention_mask, width)
    x = F.embedding(input_ids, model.embed_tokens.weight)
    for layer in model.layers:
        x = layer(x, cos, signed_sin, attn_bias, cache)
    cache.advance(1)
    return F.rms_norm(x, model.norm.weight.shape, model.norm.weight, model.norm.eps)


def layer_step(
    layer: LlamaDecoderLayer,
    x: Tensor,
    cos: Tensor,
    signed_sin: Tensor,
    attn_bias: Tensor,
    cache: KVCache,
) -> Tensor:
    """``LlamaDecoderLayer.forward`` on the fast decode path: the sublayers' weights are used
    directly (their module calls cost more than their math at decode sizes) and, without
    autograd, intermediates are overwritten in place. ``h + x`` and ``x + h`` are the same
    float sum; ``F.rms_norm`` is ``RMSNorm`` in float32, bit for bit."""
    norm1, norm2, mlp = layer.input_layernorm, layer.post_attention_layernorm, layer.mlp
    h = F.rms_norm(x, norm1.weight.shape, norm1.weight, norm1.eps)
    x = attention_step(layer.self_attn, h, cos, signed_sin, attn_bias, cache).add_(x)
    h = F.rms_norm(x, norm2.weight.shape, norm2.weight, norm2.eps)
    gate = F.silu(F.linear(h, mlp.gate_proj.weight), inplace=True)
    h = gate.mul_(F.linear(h, mlp.up_proj.weight))
    return F.linear(h, mlp.down_proj.weight).add_(x)


def attention_step(
    attn: LlamaAttention,
    x: Tensor,
    cos: Tensor,
    signed_sin: Tensor,
    attn_bias: Tensor,
    cache: KVCache,
) -> Tensor:
    """``LlamaAttention.forward`` for one new token per row (``x [N, 1, H]``), fast path.

    Args:
        cos, signed_sin: ``[N, 1, 1, head_dim]``, ``signed_sin`` = ``sin`` with its first
            half negated (see ``rope_table_lookup``).
        attn_bias: ``[N, 1, 1, W]`` float, 0 = may attend, -inf = masked; ``W`` is the filled
            cache length or, unfilled slots masked, the whole cache buffer.

    One matmul for q, k and v (``packed_qkv``), RoPE on all query and key heads at once, and
    attention as two batched matmuls over the key/value head groups (at one query per row,
    cheaper on CPU than SDPA's kernel).
    """
    n = x.shape[0]
    heads, kv_heads, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    weight, bias = packed_qkv(attn, cache)
    qk, v = F.linear(x, weight, bias).split([(heads + kv_heads) * d, kv_heads * d], dim=-1)
    # apply_rotary: rotate_half(x) * sin = cat(x2, x1) * signed_sin, bit for bit
    qk = qk.view(n, 1, heads + kv_heads, d)
    swapped = torch.cat((qk[..., d // 2 :], qk[..., : d // 2]), dim=-1)
    qk = qk * cos
    qk += swapped * signed_sin
    q = qk[:, 0, :heads].reshape(n, kv_heads, heads // kv_heads, d)
    k, v = qk[:, 0, heads:, None], v.view(n, kv_heads, 1, d)
    if attn_bias.shape[-1] == cache.max_length:
        cache.write(attn.layer_idx, k, v)
        k, v = cache.keys[attn.layer_idx], cache.values[attn.layer_idx]
    else:
        k, v = cache.update(attn.layer_idx, k, v)
    # the query heads sharing a key/value head are the rows of one [H/KV, D] @ [D, W] product
    scores = torch.matmul(q, k.transpose(-1, -2))
    probs = scores.mul_(d**-0.5).add_(attn_bias).softmax(-1)
    return F.linear(torch.matmul(probs, v).view(n, 1, heads * d), attn.o_proj.weight)


def packed_qkv(attn: LlamaAttention, cache: KVCache) -> tuple[Tensor, Tensor | None]:
    """The ``[q; k; v]`` projection weight (and bias) of ``attn``: one matmul instead of three.

    Kept in the cache (one generation, during which the weights are fixed) and rebuilt if a
    source weight has been replaced or updated in place since.
    """
    linears = (attn.q_proj, attn.k_proj, attn.v_proj)
    key = tuple((m.weight.data_ptr(), m.weight._version) for m in linears)
    packed = cache.derived.get(attn.layer_idx)
    if packed is None or packed[0] != key:
        weight = torch.cat([m.weight for m in linears])
        bias = None if linears[0].bias is None else torch.cat([m.bias for m in linears])
        packed = (key, weight, bias)
        cache.derived[attn.layer_idx] = packed
    return packed[1], packed[2]


def rope_table_lookup(
    rotary: RotaryEmbedding, position_ids: Tensor, cache: KVCache
) -> tuple[Tensor, Tensor]:
    """``rotary(position_ids)`` for positions below ``cache.max_length`` as ``(cos, signed_sin)``,
    ``sin`` with its first half negated, gathered from a per-cache table (the same values; one op
    per step instead of five)."""
    key = (rotary.inv_freq.data_ptr(), rotary.inv_freq._version)
    table = cache.derived.get("rope")
    if table is None or table[0] != key:
        cos, sin = rotary(torch.arange(cache.max_length, device=position_ids.device)[:, None])
        table = (key, torch.cat((cos, signed_sin_of(sin)), dim=-1)[:, 0, 0])  # [max_length, 2D]
        cache.derived["rope"] = table
    cos_sin = F.embedding(position_ids, table[1])[:, None]  # [N, 1, T, 2 * head_dim]
    return cos_sin.chunk(2, dim=-1)


def signed_sin_of(sin: Tensor) -> Tensor:
    """``sin`` with its first half negated: ``rotate_half(x) * sin == swap_halves(x) * this``."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def decode_bias(attention_mask: Tensor, width: int) -> Tensor:
    """``llama._causal_padding_mask(attention_mask, 1)`` as an additive ``[N, 1, 1, width]``
    float bias (0 = may attend, -inf = masked), keys past ``S`` (unfilled cache slots) masked.

    One query (the last position) may causally see every key, so this is the key mask with the
    query's own key always allowed; built once per step and shared by every layer.
    """
    n, s = attention_mask.shape
    bias = torch.full((n, width), float("-inf"), device=attention_mask.device)
    bias[:, :s].masked_fill_(attention_mask, 0.0)
    bias[:, s - 1] = 0.0
    return bias[:, None, None, :]
