"""Rotary position embedding (Su et al. 2021) and the RoPE scalings pretrained checkpoints declare.

A checkpoint's ``rope_scaling`` (transformers 4.x) or ``rope_parameters`` (5.x) names a
``rope_type``; each type is a rule that rescales RoPE's inverse frequencies (and, for ``yarn``,
the cos/sin amplitude). transformers' ``modeling_rope_utils.py`` is the reference; the parity
tests compare against it. Supported:

- ``default``: ``inv_freq[i] = theta ** (-2i / head_dim)``.
- ``linear`` (position interpolation, Chen et al. 2023): every frequency divided by ``factor``.
- ``llama3`` (Llama 3.1/3.2): wavelengths longer than ``original_max_position_embeddings /
  low_freq_factor`` divided by ``factor``, shorter than ``... / high_freq_factor`` kept, and a
  linear blend between the two. An absent ``original_max_position_embeddings`` (here and for
  ``yarn``) is the model's ``max_position_embeddings``, as in transformers.
- ``yarn`` (Peng et al. 2023; Qwen's long-context recipe): interpolation for the low frequencies,
  extrapolation for the high ones with a linear ramp between the dimensions that turn
  ``beta_slow`` / ``beta_fast`` times in the original context, and cos/sin scaled by
  ``attention_factor`` (default ``0.1 ln(factor) + 1``).

Refused (``RopeScalingError`` naming the key): ``dynamic`` (its frequencies depend on each
sequence's length, so a rollout's and an update's logits could differ), ``longrope`` and any
other type, a key a type does not read, and a value out of range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# per rope_type: (required keys, optional keys with their defaults)
ROPE_TYPES: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "default": ((), {}),
    "linear": (("factor",), {}),
    "llama3": (
        ("factor", "low_freq_factor", "high_freq_factor"),
        {"original_max_position_embeddings": None},  # None: max_position_embeddings
    ),
    "yarn": (
        ("factor",),
        {
            "original_max_position_embeddings": None,  # None: max_position_embeddings
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "attention_factor": None,  # None: 0.1 * ln(factor) + 1
            "truncate": True,
        },
    ),
}


class RopeScalingError(ValueError):
    """A ``rope_scaling`` astrai cannot compute exactly; the message names the key."""


def normalize_rope_scaling(scaling: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A checkpoint's scaling dict -> astrai's form: ``rope_type`` plus the type's keys, or None
    for plain RoPE. Accepts the older ``type`` key; ``rope_theta`` (transformers 5 keeps it in
    the same dict) is left out: it is ``LlamaConfig.rope_theta``."""
    if not scaling:
        return None
    params = {k: v for k, v in scaling.items() if k not in ("type", "rope_theta")}
    rope_type = params.pop("rope_type", None) or scaling.get("type") or "default"
    if rope_type not in ROPE_TYPES:
        raise RopeScalingError(
            f"rope_type {rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)})"
            + (
                "; dynamic NTK scaling changes RoPE with each sequence's length"
                if rope_type == "dynamic"
                else ""
            )
        )
    required, optional = ROPE_TYPES[rope_type]
    for key, value in params.items():
        if key not in required and key not in optional:
            raise RopeScalingError(
                f"rope_scaling key {key!r} (= {value!r}) is not read by rope_type "
                f"{rope_type!r}; astrai does not honour it"
            )
    for key in required:
        if key not in params:
            raise RopeScalingError(f"rope_scaling of rope_type {rope_type!r} needs {key!r}")
    _check_values(rope_type, params)
    return None if rope_type == "default" else {"rope_type": rope_type, **params}


def _check_values(rope_type: str, params: Mapping[str, Any]) -> None:
    for key, value in params.items():
        if key == "truncate":
            if not isinstance(value, bool):
                raise RopeScalingError(f"rope_scaling.truncate must be true or false ({value!r})")
            continue
        if value is None and key in ROPE_TYPES[rope_type][1]:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and value > 0):
            raise RopeScalingError(f"rope_scaling.{key} must be a number > 0 (got {value!r})")
    if rope_type == "llama3" and params["high_freq_factor"] <= params["low_freq_factor"]:
        raise RopeScalingError(
            f"rope_scaling.high_freq_factor ({params['high_freq_factor']}) must exceed "
            f"low_freq_factor ({params['low_freq_factor']})"
        )


def rope_frequencies(
    head_dim: int,
    theta: float,
    scaling: Mapping[str, Any] | None = None,
    max_position_embeddings: int | None = None,
) -> tuple[Tensor, float]:
    """(``inv_freq [head_dim / 2]`` float32, the cos/sin amplitude) of a RoPE config.

    ``max_position_embeddings``: the model's, which ``yarn`` without an
    ``original_max_position_embeddings`` takes as the original context.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    if not scaling:
        return inv_freq, 1.0
    rope_type, factor = scaling["rope_type"], float(scaling["factor"])
    if rope_type == "linear":
        return inv_freq / factor, 1.0
    context = scaling.get("original_max_position_embeddings") or max_position_embeddings
    if context is None:
        raise RopeScalingError(f"rope_type {rope_type!r} needs original_max_position_embeddings")
    if rope_type == "llama3":
        return _llama3(inv_freq, scaling, float(context)), 1.0
    return _yarn(head_dim, theta, scaling, float(context))


def _llama3(inv_freq: Tensor, scaling: Mapping[str, Any], context: float) -> Tensor:
    """Llama 3.1's rule: long wavelengths interpolated by ``factor``, short ones kept, a linear
    blend (in 1/wavelength) between ``context / low_freq_factor`` and ``context /
    high_freq_factor``."""
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    wavelength = 2 * math.pi / inv_freq
    scaled = torch.where(wavelength > context / low, inv_freq / factor, inv_freq)
    # 0 at the long-wavelength edge, 1 at the short one
    blend = (context / wavelength - low) / (high - low)
    smoothed = (1 - blend) * scaled / factor + blend * scaled
    between = (wavelength >= context / high) & (wavelength <= context / low)
    return torch.where(between, smoothed, scaled)


def _yarn(
    head_dim: int, theta: float, scaling: Mapping[str, Any], context: float
) -> tuple[Tensor, float]:
    """YaRN: per dimension pair, interpolated (``/ factor``) below the ramp, extrapolated (kept)
    above it; the ramp spans the dimensions turning ``beta_slow`` .. ``beta_fast`` times over
    the original context."""
    factor = float(scaling["factor"])
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    beta_fast = float(scaling.get("beta_fast") or 32.0)
    beta_slow = float(scaling.get("beta_slow") or 1.0)
    truncate = scaling.get("truncate", True)

    def dimension(rotations: float) -> float:
        """The (fractional) dimension whose frequency turns ``rotations`` times in context."""
        return (head_dim * math.log(context / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = dimension(beta_fast), dimension(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # no division by zero
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    wavelength_base = theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    extrapolation, interpolation = 1.0 / wavelength_base, 1.0 / (factor * wavelength_base)
    keep = 1 - ramp  # 1: extrapolate (high frequencies), 0: interpolate
    inv_freq = interpolation * (1 - keep) + extrapolation * keep
    return inv_freq, float(attention_factor)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding, HF's ``rotate_half`` convention, with a checkpoint's scaling.

    Given a bound on the positions, cos and sin are read from a cached table of every position
    below it (one per device and dtype of ``inv_freq``, grown to the next power of two when a
    longer sequence comes) instead of being computed over ``[N, T, head_dim]`` in every
    forward. The table holds the same elementwise products, cosines and sines, so the rows are
    bitwise the values computed directly (a test pins it).
    """

    inv_freq: Tensor  # a non-persistent buffer (``register_buffer`` in ``__init__``)

    def __init__(
        self,
        head_dim: int,
        theta: float,
        scaling: Mapping[str, Any] | None = None,
        max_position_embeddings: int | None = None,
    ) -> None:
        super().__init__()
        inv_freq, self.amplitude = rope_frequencies(
            head_dim, theta, scaling, max_position_embeddings
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        # (device, dtype) of inv_freq -> (cos, sin) ``[L, head_dim]``; a plain attribute, not a
        # buffer: never saved, and rebuilt when the module moves (the key no longer matches)
        self._table: tuple[tuple[torch.device, torch.dtype], Tensor, Tensor] | None = None

    def forward(
        self, position_ids: Tensor, max_position: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """``[N, T]`` positions -> (cos, sin), each ``[N, 1, T, head_dim]``.

        ``max_position``: a bound (exclusive) on ``position_ids`` known without looking at them
        (no device sync); with it the cached table is indexed, without it the values are
        computed.
        """
        if max_position is None:
            cos, sin = self.compute(position_ids)
        else:
            cos_table, sin_table = self.table(max_position)
            # a row lookup (embedding) is several times faster than advanced indexing on CPU
            cos, sin = F.embedding(position_ids, cos_table), F.embedding(position_ids, sin_table)
        return cos[:, None], sin[:, None]

    def compute(self, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """``[...]`` positions -> (cos, sin) ``[..., head_dim]``, computed."""
        freqs = position_ids.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        if self.amplitude == 1.0:  # the plain RoPE path stays bitwise what it was
            return emb.cos(), emb.sin()
        return emb.cos() * self.amplitude, emb.sin() * self.amplitude

    def table(self, length: int) -> tuple[Tensor, Tensor]:
        """(cos, sin) ``[L, head_dim]`` of positions ``0 .. L - 1`` for some ``L >= length``."""
        key = (self.inv_freq.device, self.inv_freq.dtype)
        if self._table is None or self._table[0] != key or self._table[1].shape[0] < length:
            rows = 1 << max(length - 1, 63).bit_length()  # a power of two, at least 64
            # ordinary tensors even when first asked for under inference mode (the training
            # forward saves what it indexes from them for backward)
            with torch.inference_mode(False), torch.no_grad():
                positions = torch.arange(rows, device=self.inv_freq.device)
                self._table = (key, *self.compute(positions))
        return self._table[1], self._table[2]


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``x [..., head_dim]`` rotated by (cos, sin) broadcastable to it."""
    return x * cos.to(x.dtype) + _rotate_half(x) * sin.to(x.dtype)
