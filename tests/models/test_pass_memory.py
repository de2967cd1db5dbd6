"""A pass's token budget and the rows it allows (``models.pass_memory``), hand-computed."""

from __future__ import annotations

import pytest
import torch

from astrai.models.llama import LlamaConfig
from astrai.models.pass_memory import (
    kv_bytes_per_token,
    rows_per_pass,
    scoring_bytes_per_token,
    token_budget,
)

# Qwen3-0.6B's published shapes: 28 layers, 8 KV heads of 128, vocabulary 151,936
QWEN3 = LlamaConfig(
    vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
    num_attention_heads=16, num_key_value_heads=8, head_dim=128,
)  # fmt: skip


def test_kv_bytes_per_token_are_keys_and_values_of_every_layer() -> None:
    # 2 (K, V) × 28 layers × 8 heads × 128 × 2 bytes = 114,688 (112 KiB, docs/memory.md)
    assert kv_bytes_per_token(QWEN3, torch.bfloat16) == 114_688
    assert kv_bytes_per_token(QWEN3, torch.float32) == 229_376


def test_scoring_bytes_add_the_logits_and_a_layers_activations() -> None:
    # KV 114,688 + logits 151,936 × 2 + activations 8 × 3,072 × 2
    assert scoring_bytes_per_token(QWEN3, torch.bfloat16, True) == 114_688 + 303_872 + 49_152
    assert scoring_bytes_per_token(QWEN3, torch.bfloat16, False) == 114_688 + 49_152


def test_auto_is_a_quarter_of_the_devices_memory() -> None:
    cpu = torch.device("cpu")
    assert token_budget("auto", 1024, cpu, memory=80 * 2**30) == 20 * 2**20
    assert token_budget(5000, 1024, cpu) == 5000
    assert token_budget(None, 1024, cpu) is None
    with pytest.raises(ValueError, match="positive integer, null or auto"):
        token_budget("lots", 1024, cpu)


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (None, 512),  # no bound: every row
        (10**9, 512),  # fits
        (20_000, 8),  # 9 rows of 2,048 fit: down to the group's multiple
        (6_000, 2),  # under one group: as many rows as fit
        (100, 1),  # not one row fits: one at a time
    ],
)
def test_rows_per_pass(budget: int | None, expected: int) -> None:
    assert rows_per_pass(budget, 2048, 512, 8) == expected
