"""The fast path for one-token decoding steps on CPU in float32 without autograd: the sampler's
steps after the prompt, the same math as ``LlamaForCausalLM.forward`` with a KV cache, in fewer
and cheaper ops.

At small model sizes a decoding step costs mostly per-op overhead, so ``Decoder`` keeps what the
steps of one generation share instead of rebuilding it every step: the additive attention bias
over the whole cache (one column changes per step), each row's position (a running count of its
attended tokens), a RoPE table, and q/k/v packed into one projection with the queries
pre-scaled. Layers are run from their weights directly (module calls cost more than their math
at decode sizes), attention is two batched matmuls over the key/value head groups (at one query
per row, cheaper on CPU than SDPA's kernel) and intermediates are overwritten in place. Tests
compare every step with one full ``forward``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from astrai.models.kv_cache import KVCache

if TYPE_CHECKING:
    from astrai.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM


class Decoder:
    """One generation's one-token decoding steps after its prompt, on the CPU fast path.

    The caller owns ``attention_mask``, the generation's ``[N, max_length]`` bool key mask
    (True = a real token): before each ``step`` it sets the column of the tokens it feeds
    (``cache.length``), and it never changes the column of a token already fed. Each step reads
    that one column, which is what makes the step cheap.
    """

    def __init__(self, model: LlamaForCausalLM, cache: KVCache, attention_mask: Tensor) -> None:
        """``cache`` holds the prompt (``cache.length`` tokens, the columns of
        ``attention_mask`` before it); ``attention_mask [N, cache.max_length]``."""
        if not self.applies(model, cache, "fp32"):
            raise ValueError("the fast decode path needs a CPU float32 model without autograd")
        expected = (cache.keys[0].shape[0], cache.max_length)
        if tuple(attention_mask.shape) != expected:
            raise ValueError(f"attention_mask is {tuple(attention_mask.shape)}, not {expected}")
        self.cache, self.mask = cache, attention_mask
        filled = attention_mask[:, : cache.length]
        # the tokens each row attends to so far: the next token's position (its count minus
        # one, ``position_ids_from_mask``) indexes ``rope_rows`` as count, rows shifted by one
        self.count = filled.sum(-1, keepdim=True)  # [N, 1]
        self.rope_rows = rope_table(model, cache.max_length + 1)
        # additive attention bias over the whole cache buffer: 0 = may attend, -inf = masked or
        # not yet written
        self.key_bias = torch.full(
            attention_mask.shape, float("-inf"), device=attention_mask.device
        )
        self.key_bias[:, : cache.length].masked_fill_(filled, 0.0)
        self.attn_bias = self.key_bias[:, None, None]  # [N, 1, 1, max_length], the same memory
        trunk = model.model
        # nn.ModuleList is not generic (its items are typed Module): LlamaModel builds it of
        # LlamaDecoderLayer only
        layers = [cast("LlamaDecoderLayer", layer) for layer in trunk.layers]
        self.layers = [LayerWeights.of(layer) for layer in layers]
        self.embed_tokens, self.lm_head = trunk.embed_tokens.weight, model.lm_head.weight
        self.norm, self.norm_eps = trunk.norm.weight, trunk.norm.eps

    @staticmethod
    def applies(model: LlamaForCausalLM, cache: KVCache, precision: str) -> bool:
        """Whether this path may decode for ``model`` at ``precision`` (``infra.precision``):
        no autograd (its packed weights are copies), CPU (on GPU, SDPA's fused kernels are the
        fast path) and float32 (its attention would accumulate in a lower precision; so not
        for ``bf16``). Not for a model with LoRA adapters (``models.lora``): this path reads
        the base weights directly and would not see them."""
        weight = model.lm_head.weight
        return (
            not hasattr(model, "peft_config")  # set by peft.inject_adapter_in_model
            and not torch.is_grad_enabled()
            and precision == "fp32"
            and weight.device.type == "cpu"
            and weight.dtype == torch.float32
            and cache.keys[0].dtype == torch.float32
        )

    def step(self, input_ids: Tensor) -> Tensor:
        """Feed one token per row (``input_ids [N, 1]``) -> the next-token logits ``[N, V]``."""
        cache = self.cache
        col = cache.length
        if col >= cache.max_length:
            raise ValueError(f"KV cache overflow: {col + 1} tokens > max_length {cache.max_length}")
        if col > 0:
            # the previous token was let attend to itself whatever its mask (see below)
            self.key_bias[:, col - 1].masked_fill_(~self.mask[:, col - 1], float("-inf"))
        # every query sees its own key: a row none of whose tokens count (a finished row, its
        # output discarded) stays finite, as in ``forward``'s causal padding mask
        self.key_bias[:, col] = 0.0
        self.count += self.mask[:, col : col + 1]
        cos, signed_sin = F.embedding(self.count, self.rope_rows).chunk(2, dim=-1)  # [N, 1, D]
        # Reading a cache slice with gaps between rows is 2-3x slower on CPU than reading the
        # whole (contiguous) buffer; once the filled part is at least half of it, attend over
        # the whole buffer (unwritten slots are masked).
        width = cache.max_length if 2 * (col + 1) >= cache.max_length else col + 1
        bias = self.attn_bias[..., :width]
        x = F.embedding(input_ids[:, 0], self.embed_tokens)  # [N, H]
        for layer in self.layers:
            x = layer_step(layer, x, cos, signed_sin, bias, cache)
        cache.advance(1)
        return F.linear(F.rms_norm(x, self.norm.shape, self.norm, self.norm_eps), self.lm_head)


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's weights as the fast path uses them (attribute lookups on modules cost
    more than their math at decode sizes). ``qkv`` / ``qkv_bias``: ``packed_qkv``."""

    index: int
    heads: int
    kv_heads: int
    head_dim: int
    input_norm: Tensor
    input_norm_eps: float
    qkv: Tensor
    qkv_bias: Tensor | None
    o_proj: Tensor
    post_norm: Tensor
    post_norm_eps: float
    gate_proj: Tensor
    up_proj: Tensor
    down_proj: Tensor
    # Qwen3's per-head q/k RMSNorm weights ``[head_dim]`` (None without): with them the queries
    # are scaled by ``1 / sqrt(head_dim)`` after the norm (a norm undoes a scale before it)
    q_norm: Tensor | None = None
    k_norm: Tensor | None = None
    qk_norm_eps: float = 0.0

    @classmethod
    def of(cls, layer: LlamaDecoderLayer) -> LayerWeights:
        attn, mlp = layer.self_attn, layer.mlp
        norm1, norm2 = layer.input_layernorm, layer.post_attention_layernorm
        qkv, qkv_bias = packed_qkv(attn)
        return cls(
            index=attn.layer_idx,
            heads=attn.num_heads,
            kv_heads=attn.num_kv_heads,
            head_dim=attn.head_dim,
            input_norm=norm1.weight,
            input_norm_eps=norm1.eps,
            qkv=qkv,
            qkv_bias=qkv_bias,
            o_proj=attn.o_proj.weight,
            post_norm=norm2.weight,
            post_norm_eps=norm2.eps,
            gate_proj=mlp.gate_proj.weight,
            up_proj=mlp.up_proj.weight,
            down_proj=mlp.down_proj.weight,
            q_norm=None if attn.q_norm is None else attn.q_norm.weight,
            k_norm=None if attn.k_norm is None else attn.k_norm.weight,
            qk_norm_eps=0.0 if attn.q_norm is None else attn.q_norm.eps,
        )


def layer_step(
    w: LayerWeights, x: Tensor, cos: Tensor, signed_sin: Tensor, attn_bias: Tensor, cache: KVCache
) -> Tensor:
    """``LlamaDecoderLayer.forward`` for one token per row (``x [N, H]``). ``h + x`` and
    ``x + h`` are the same float sum; ``F.rms_norm`` is ``RMSNorm`` in float32, bit for bit."""
    h = F.rms_norm(x, w.input_norm.shape, w.input_norm, w.input_norm_eps)
    x = attention_step(w, h, cos, signed_sin, attn_bias, cache).add_(x)
    h = F.rms_norm(x, w.post_norm.shape, w.post_norm, w.post_norm_eps)
    gate = F.silu(F.linear(h, w.gate_proj), inplace=True)
    return F.linear(gate.mul_(F.linear(h, w.up_proj)), w.down_proj).add_(x)


def attention_step(
    w: LayerWeights, x: Tensor, cos: Tensor, signed_sin: Tensor, attn_bias: Tensor, cache: KVCache
) -> Tensor:
    """``LlamaAttention.forward`` for one token per row (``x [N, H]``).

    Args:
        cos, signed_sin: ``[N, 1, head_dim]``, ``signed_sin`` = ``sin`` with its first half
            negated (see ``rope_table``).
        attn_bias: ``[N, 1, 1, W]`` float, 0 = may attend, -inf = masked; ``W`` is the filled
            cache length or, unfilled slots masked, the whole cache buffer.
    """
    n = x.shape[0]
    heads, kv_heads, d = w.heads, w.kv_heads, w.head_dim
    qk, v = F.linear(x, w.qkv, w.qkv_bias).split([(heads + kv_heads) * d, kv_heads * d], dim=-1)
    # apply_rotary on every query and key head at once: rotate_half(x) * sin is
    # cat(x2, x1) * signed_sin, bit for bit
    qk = qk.view(n, heads + kv_heads, d)
    if w.q_norm is not None and w.k_norm is not None:
        q = F.rms_norm(qk[:, :heads], (d,), w.q_norm, w.qk_norm_eps).mul_(d**-0.5)
        qk = torch.cat((q, F.rms_norm(qk[:, heads:], (d,), w.k_norm, w.qk_norm_eps)), dim=1)
    swapped = torch.cat((qk[..., d // 2 :], qk[..., : d // 2]), dim=-1)
    qk = qk * cos
    qk += swapped * signed_sin
    q = qk[:, :heads].reshape(n, kv_heads, heads // kv_heads, d)
    k, v = qk[:, heads:, None], v.view(n, kv_heads, 1, d)
    if attn_bias.shape[-1] == cache.max_length:
        cache.write(w.index, k, v)
        k, v = cache.keys[w.index], cache.values[w.index]
    else:
        k, v = cache.update(w.index, k, v)
    # the query heads sharing a key/value head are the rows of one [H/KV, D] @ [D, W] product;
    # the queries come pre-scaled by 1 / sqrt(head_dim)
    probs = torch.matmul(q, k.transpose(-1, -2)).add_(attn_bias).softmax(-1)
    return F.linear(torch.matmul(probs, v).view(n, heads * d), w.o_proj)


def packed_qkv(attn: LlamaAttention) -> tuple[Tensor, Tensor | None]:
    """The ``[q / sqrt(head_dim); k; v]`` projection weight (and bias) of ``attn``: one matmul
    instead of three, and scores that need no scaling (RoPE is linear: scaling the queries before
    it is scaling them after). With a q/k norm (Qwen3) the queries are scaled after it instead
    (``attention_step``), so here not at all."""
    q, k, v = attn.q_proj, attn.k_proj, attn.v_proj
    scale = 1.0 if attn.q_norm is not None else attn.head_dim**-0.5
    weight = torch.cat([q.weight * scale, k.weight, v.weight])
    bias = None if q.bias is None else torch.cat([q.bias * scale, k.bias, v.bias])
    return weight, bias


def rope_table(model: LlamaForCausalLM, rows: int) -> Tensor:
    """``[rows, 2 * head_dim]``: row ``i`` is ``cat(cos, signed_sin)`` of ``model``'s rotary
    embedding at position ``max(i - 1, 0)`` (row = a count of attended tokens, see ``Decoder``);
    ``signed_sin`` is ``sin`` with its first half negated."""
    positions = (torch.arange(rows, device=model.lm_head.weight.device) - 1).clamp_min(0)
    cos, sin = model.model.rotary_emb(positions[:, None])  # [rows, 1, 1, D]
    return torch.cat((cos, signed_sin_of(sin)), dim=-1)[:, 0, 0]


def signed_sin_of(sin: Tensor) -> Tensor:
    """``sin`` with its first half negated: ``rotate_half(x) * sin == swap_halves(x) * this``."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
