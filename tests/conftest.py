"""Shared fixtures: a tiny random-init policy built locally (no downloads)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from astrai.models.llama import LlamaForCausalLM
    from astrai.models.tokenizer import CharTokenizer

# The suite is the CPU suite: on a GPU machine `infra.device=auto` would move every composed run
# to CUDA, where kernels differ (digests, bitwise metric equality) and tests that build their
# input tensors on the CPU meet a CUDA model. Measured on an H200 (docs/gpu.md, 2026-12-04): 20
# such failures, none of them a product bug. `make gpu-check` is the CUDA check; set
# ASTRAI_TEST_CUDA=1 to run the suite with the GPUs visible anyway. Set at import, before
# anything initialises CUDA (torch reads the variable then); subprocesses inherit it.
# Only where an NVIDIA driver is (its control device; asking torch would initialise CUDA, after
# which the variable is not read): elsewhere the environment stays the user's.
if os.environ.get("ASTRAI_TEST_CUDA") != "1" and os.path.exists("/dev/nvidiactl"):
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # The tests' models are tiny: one intra-op thread is as fast as two and, on a shared 2-core
    # machine, far faster than two threads contending with another process for one core. Set
    # before anything imports astrai.training.setup (its TORCH_DEFAULT_THREADS reads it). Not in
    # xdist's controller, which runs no test: its torch import (~2 s) would delay the workers.
    controller = not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no"
    if controller and not config.getoption("collectonly"):
        return
    import torch
    from tests.yaml_cache import install

    torch.set_num_threads(1)
    install()  # each YAML text parsed once a process: half the suite's CPU is Hydra composing


# Hypothesis profiles (before any test module builds its settings): ``ci``, the default, keeps the
# slow suite inside its budget; ``deep`` is the search to run on demand after touching config
# validation: HYPOTHESIS_PROFILE=deep make test-slow (or pytest tests/config/test_fuzz_overrides.py)
settings.register_profile("ci", max_examples=50)
settings.register_profile("deep", max_examples=250)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def tokenizer() -> CharTokenizer:
    from astrai.models.tokenizer import CharTokenizer

    return CharTokenizer()


@pytest.fixture
def tiny_model() -> LlamaForCausalLM:
    import torch

    from astrai.models.llama import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    # larger init than training uses, so logits are far from uniform and bugs show; two layers,
    # so every per-layer path (KV cache, decoder) is crossed from one layer to the next
    config = LlamaConfig(num_hidden_layers=2, initializer_range=0.2)
    return LlamaForCausalLM(config).eval()
