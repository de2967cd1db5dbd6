"""Shared fixtures: a tiny random-init policy built locally (no downloads)."""

from __future__ import annotations

import pytest
import torch

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer

# The tests' models are tiny: one intra-op thread is as fast as two and, on a shared 2-core
# machine, far faster than two threads contending with another process for one core.
torch.set_num_threads(1)


@pytest.fixture
def tokenizer() -> CharTokenizer:
    return CharTokenizer()


@pytest.fixture
def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    # larger init than training uses, so logits are far from uniform and bugs show; two layers,
    # so every per-layer path (KV cache, decoder) is crossed from one layer to the next
    config = LlamaConfig(num_hidden_layers=2, initializer_range=0.2)
    return LlamaForCausalLM(config).eval()
