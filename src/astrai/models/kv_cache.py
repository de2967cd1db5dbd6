"""A preallocated key/value cache for batched autoregressive decoding."""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Per-layer keys and values, each ``[N, kv_heads, max_length, head_dim]``.

    Layers write their new keys/values at ``length``; the model calls ``advance`` once per
    forward, after every layer has written. Preallocating avoids a ``torch.cat`` of the whole
    history at every decoding step.
    """

    def __init__(
        self,
        num_layers: int,
        batch_size: int,
        num_kv_heads: int,
        max_length: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (batch_size, num_kv_heads, max_length, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.max_length = max_length
        self.length = 0

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store ``k, v [N, kv_heads, T, D]`` after the cached ones; return all cached so far."""
        end = self.write(layer, k, v)
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def write(self, layer: int, k: Tensor, v: Tensor) -> int:
        """Store ``k, v [N, kv_heads, T, D]`` after the cached ones; return the filled length.

        Slots past it hold zeros (or stale keys/values) that an attention over the whole
        ``keys[layer]`` / ``values[layer]`` buffers must mask out.
        """
        end = self.length + k.shape[2]
        if end > self.max_length:
            raise ValueError(f"KV cache overflow: {end} tokens > max_length {self.max_length}")
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return end

    def advance(self, t: int) -> None:
        self.length += t

    def select_rows(self, index: Tensor, max_length: int | None = None) -> KVCache:
        """A new cache whose row ``i`` is a copy of this cache's row ``index[i]`` (same
        ``length``), of ``max_length`` tokens (None: this cache's; at least ``length``, at most
        this cache's: a shorter copy holds the filled slots and fewer free ones); ``index
        [N']``."""
        end = self.max_length if max_length is None else max_length
        if not self.length <= end <= self.max_length:
            raise ValueError(f"select_rows: max_length {end} outside [{self.length}, "
                             f"{self.max_length}]")  # fmt: skip
        rows = KVCache.__new__(KVCache)
        rows.keys = [k[:, :, :end].index_select(0, index) for k in self.keys]
        rows.values = [v[:, :, :end].index_select(0, index) for v in self.values]
        rows.max_length, rows.length = end, self.length
        return rows
