"""The attention mask a forward passes to ``scaled_dot_product_attention``, or none.

A dense boolean mask ``[N, 1, T, S]`` says exactly which keys each query sees (causal, valid
keys only), and works everywhere; but PyTorch's FlashAttention kernel takes no mask, so with one
CUDA falls back to the memory-efficient or the math kernel. A forward without a cache whose rows
are each a prefix of valid tokens then padding (right-padded: the update's and π_old's
whole-sequence rows, ``models.shared_prefix.padding_free_rows``, and a prompt of one length
with its response) needs nothing but causality: a valid query never looks right, so it reads
no pad. There ``is_causal`` replaces the mask on CUDA. The CPU keeps the mask: its kernels
round otherwise, and the recorded default-job digests ran with it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal_padding_mask(attention_mask: Tensor, t: int) -> Tensor:
    """``[N, S]`` key mask -> ``[N, 1, T, S]``: query i (at absolute ``S - T + i``) sees valid keys
    at or before it. Every query also sees itself, so a pad query row is never all-masked (which
    would give NaN); pad rows are garbage but finite and no valid row ever reads them."""
    s = attention_mask.shape[1]
    q_abs = torch.arange(s - t, s, device=attention_mask.device)
    k_abs = torch.arange(s, device=attention_mask.device)
    causal = k_abs[None, :] <= q_abs[:, None]  # [T, S]
    allowed = causal[None] & attention_mask[:, None, :]  # [N, T, S]
    allowed = allowed | (k_abs[None, :] == q_abs[:, None])[None]
    return allowed[:, None]


def right_padded(attention_mask: Tensor) -> bool:
    """Whether every row of ``attention_mask [N, S]`` is valid tokens then padding only."""
    mask = attention_mask.bool()
    return bool((mask[:, 1:] <= mask[:, :-1]).all())


def causal_suffices(attention_mask: Tensor, t: int) -> bool:
    """Whether a forward of ``t`` new tokens over ``attention_mask [N, S]`` computes every valid
    token's output with ``is_causal`` and no mask: no cached tokens (``S == T``) and
    right-padded rows."""
    return attention_mask.shape[1] == t and right_padded(attention_mask)


def attention_mask_for(attention_mask: Tensor, t: int) -> Tensor | None:
    """The ``attn_mask`` of every layer's attention: None (``is_causal``) on CUDA where
    ``causal_suffices`` (FlashAttention may run), else ``causal_padding_mask``."""
    if attention_mask.device.type == "cuda" and causal_suffices(attention_mask, t):
        return None
    return causal_padding_mask(attention_mask, t)
