"""How many rows one pass may hold: a token budget, set as a number or derived from the device.

A pass is one forward over a set of rows: a sampling chunk (its KV cache holds every row at
prompt + response length from the first step on), or a scoring part (reference, π_old, critic).
Its memory grows with the tokens it holds, so its size is bounded in tokens (rows × padded
length), as verl bounds its log-prob passes (``log_prob_max_token_len_per_gpu``). ``auto``
derives the budget from the device's memory and the bytes one token of the pass costs at the
model's shapes (``kv_bytes_per_token``, ``scoring_bytes_per_token``): a quarter of the device
(``DEVICE_SHARE``), the rest left to the weights, optimizer state and the update. An engine
awake beside the trainer on the device (vLLM colocated on a GPU holds its
``gpu_memory_utilization`` of it for weights and KV cache) is counted first: while it holds its
share (``hold_engine_share``, until ``drop_engine_share``: vLLM's sleep or close), ``auto``
budgets take ``DEVICE_SHARE`` of what is left.
``bench/scale_memory.py`` measures the phases these budgets bound at published model shapes.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from astrai.models.llama import LlamaConfig

AUTO = "auto"
# the share of the device's memory one pass may use for what it allocates (caches, logits,
# activations) under ``auto``; the run's weights, optimizer state and gradients come on top
DEVICE_SHARE = 0.25
# engines awake on a device -> (the device, the share of its memory they hold); keyed by the
# engine's id so that two engines add up and a second hold by the same one replaces its first
_engine_shares: dict[int, tuple[tuple[str, int | None], float]] = {}


def device_memory(device: torch.device) -> int:
    """The device's memory in bytes: a GPU's total memory, or the host's RAM for the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _device_key(device: torch.device) -> tuple[str, int | None]:
    """``device`` as one key for all its spellings (``cuda`` is the current CUDA device)."""
    index = device.index
    if device.type == "cuda" and index is None:
        index = torch.cuda.current_device()
    return device.type, index


def hold_engine_share(owner: object, device: torch.device, share: float) -> None:
    """``owner``, an engine awake on ``device``, holds ``share`` (in [0, 1]) of its memory
    until ``drop_engine_share(owner)``: ``auto`` budgets on that device leave it out."""
    _engine_shares[id(owner)] = (_device_key(device), share)


def drop_engine_share(owner: object) -> None:
    """``owner`` holds no memory of its device any more (asleep, or closed); idempotent."""
    _engine_shares.pop(id(owner), None)


def engine_share(device: torch.device) -> float:
    """The share of ``device``'s memory the engines awake on it hold together (at most 1)."""
    key = _device_key(device)
    return min(1.0, sum(share for held, share in _engine_shares.values() if held == key))


def kv_bytes_per_token(config: LlamaConfig, dtype: torch.dtype) -> int:
    """A KV cache's bytes per token: keys and values of every layer's KV heads."""
    itemsize = dtype.itemsize
    return (
        2 * config.num_hidden_layers * config.num_key_value_heads * config.dim_per_head * itemsize
    )


def scoring_bytes_per_token(config: LlamaConfig, dtype: torch.dtype, with_logits: bool) -> int:
    """What a scoring pass holds per token, bounded from above: its KV cache, and a causal LM's
    logits in the compute dtype (a response position's; the float32 log-softmax runs in chunks,
    ``models.scoring.token_logprobs``), plus the hidden states a layer makes (about 8 vectors
    of the hidden or intermediate size)."""
    itemsize = dtype.itemsize
    logits = config.vocab_size * itemsize if with_logits else 0
    activations = 8 * max(config.hidden_size, config.intermediate_size) * itemsize
    return kv_bytes_per_token(config, dtype) + logits + activations


def update_bytes_per_token(
    config: LlamaConfig, dtype: torch.dtype, checkpointing: bool, with_critic: bool
) -> int:
    """What an update micro-batch holds per token until its backward, bounded from above: each
    layer's saved activations (q, k, v, the attention output and the MLP's four vectors in the
    compute dtype, three float32 residual-stream vectors), or with gradient checkpointing each
    layer's float32 input plus one layer recomputed; the logits and their gradient; the
    critic's trunk again for PPO (``with_critic``)."""
    itemsize = dtype.itemsize
    hidden, layers = config.hidden_size, config.num_hidden_layers
    layer = (6 * hidden + 4 * config.intermediate_size) * itemsize + 3 * hidden * 4
    trunk = layers * 4 * hidden + layer if checkpointing else layers * layer
    logits = 2 * config.vocab_size * itemsize
    return trunk * (2 if with_critic else 1) + logits


def token_budget(
    setting: Any, bytes_per_token: int, device: torch.device, memory: int | None = None
) -> int | None:
    """The tokens one pass may hold: ``setting`` itself (a positive int), None (no bound: one
    pass over everything), or for ``auto`` the share ``DEVICE_SHARE`` of ``memory`` (default:
    ``device_memory(device)``), less the share engines awake on ``device`` hold
    (``engine_share``), over ``bytes_per_token``."""
    if setting is None or isinstance(setting, int):
        return setting
    if setting != AUTO:
        raise ValueError(f"a token budget is a positive integer, null or auto (got {setting!r})")
    total = device_memory(device) if memory is None else memory
    free = total - round(total * engine_share(device))  # round: 0.3 of 80 GiB is 24 GiB
    return max(1, int(DEVICE_SHARE * free) // max(bytes_per_token, 1))


def rows_per_pass(budget: int | None, row_tokens: int, rows: int, multiple: int = 1) -> int:
    """How many of ``rows`` rows of ``row_tokens`` tokens one pass takes within ``budget``
    tokens (None: all), a multiple of ``multiple`` where that fits (rows sharing a prompt stay
    together, so the prompt runs once), at least one."""
    if budget is None or budget >= rows * row_tokens:
        return rows
    fit = max(1, budget // max(row_tokens, 1))
    if fit >= multiple:
        fit -= fit % multiple
    return fit
