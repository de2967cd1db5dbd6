"""The update's model FLOPs, the device peak table and the ``perf/`` throughput metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.helpers import compose_config
from torch import nn

from astrai.models.flops import matmul_weights, training_flops
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.value_model import ValueModel
from astrai.training.device_peak import DevicePeak, datasheet_peak, device_peak
from astrai.training.run import Run
from astrai.training.throughput import (
    UpdateShape,
    sequence_lengths,
    throughput_metrics,
    update_flops,
)

# hidden 4, 2 heads of width 2 (one key/value head), MLP 8, 2 layers, vocabulary 10
SMALL = LlamaConfig(
    vocab_size=10,
    hidden_size=4,
    intermediate_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=2,
    max_position_embeddings=16,
)


def test_matmul_weights_by_hand() -> None:
    # per layer: q 4·4 = 16, k and v 4·2 each = 16, o 4·4 = 16, MLP 3·4·8 = 96: 144; 2 layers
    # 288, the head 4·10 = 40 (a value head 4·1 = 4)
    assert matmul_weights(SMALL) == 328
    assert matmul_weights(SMALL, head_outputs=1) == 292


@pytest.mark.parametrize("head", ["lm", "value"])
def test_matmul_weights_are_the_models_linear_weights(head: str) -> None:
    """The count equals the weights of every ``nn.Linear`` of the real model (a tied head
    counted once, as the multiply it is; norms, biases and the embedding lookup are not)."""
    config = LlamaConfig(
        vocab_size=48,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,  # not hidden / heads: the projections' widths come from head_dim
        max_position_embeddings=32,
        qk_norm=True,
    )
    model: nn.Module = LlamaForCausalLM(config) if head == "lm" else ValueModel(config)
    weights = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)}
    assert matmul_weights(config, None if head == "lm" else 1) == sum(weights.values())


def test_training_flops_by_hand() -> None:
    # T·(6·N + 12·L·H·d·T), 12·2·2·2 = 96: T=3: 3·(1968 + 288) = 6768; T=5: 5·(1968 + 480)
    # = 12240
    assert training_flops(SMALL, [3, 5]) == 6768 + 12240
    # the value model, N = 292: 3·(1752 + 288) = 6120, 5·(1752 + 480) = 11160
    assert training_flops(SMALL, [3, 5], head_outputs=1) == 6120 + 11160


def test_throughput_metrics_by_hand() -> None:
    shape = UpdateShape(policy=SMALL, critic=SMALL, epochs=2)
    # policy 19008 + critic 17280, two epochs
    assert update_flops(shape, [3, 5]) == 2 * (19008 + 17280)
    metrics = throughput_metrics(shape, [3, 5], 6, 2.0, 3.0, DevicePeak(1000.0, "test"))
    assert metrics == {
        "perf/mfu": 72576 / 2.0 / 1000.0,
        "perf/update_tokens_per_s": 2 * 8 / 2.0,  # 8 tokens, twice, over 2 s
        "perf/step_tokens_per_s": 6 / 3.0,
    }


def test_sequence_lengths_pair_each_response_with_its_prompt() -> None:
    prompt_mask = torch.tensor([[False, True, True], [True, True, True]])  # 2 and 3 tokens
    response_mask = torch.tensor(
        [[[True, True, False], [True, False, False]], [[True, True, True], [False, False, False]]]
    )
    assert sequence_lengths(prompt_mask, response_mask) == [4, 3, 6, 3]


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", torch.bfloat16, 989.4),  # SXM
        ("NVIDIA H100 PCIe", torch.bfloat16, 756.0),
        ("NVIDIA H100 PCIe", torch.float32, 51.0),
        ("NVIDIA H200", torch.bfloat16, 989.4),  # not the H20's, whose name it contains
        ("NVIDIA H20", torch.bfloat16, 148.0),
        ("NVIDIA A100-SXM4-80GB", torch.float32, 19.5),
        ("NVIDIA L4", torch.bfloat16, 121.0),
        ("NVIDIA L40S", torch.bfloat16, 362.05),  # not the L4's
        ("NVIDIA B200", torch.float32, None),  # no fp32 number: measured instead
        ("Tesla T4", torch.bfloat16, None),  # not in the table: measured instead
    ],
)
def test_datasheet_peak_lookup(name: str, dtype: torch.dtype, tflops: float | None) -> None:
    expected = None if tflops is None else tflops * 1e12
    assert datasheet_peak(name, dtype) == expected


def test_cpu_peak_is_measured_once() -> None:
    first = device_peak(torch.device("cpu"), torch.float32)
    assert first.source == "measured matmul" and first.flops_per_s > 0
    assert device_peak(torch.device("cpu"), torch.float32) == first


def test_a_step_logs_mfu_from_its_own_numbers(tmp_path: Path) -> None:
    """A PPO step's ``perf/mfu`` is its rollout's FLOPs (policy and critic, every epoch) over
    its logged ``time/update_s`` and the CPU's measured peak."""
    overrides = ["train_type=online_ppo", "debug=quick", "train_type.group_size=2"]
    trainer = Run(compose_config([*overrides, "train_type.ppo_epochs=2"]), tmp_path)
    batches = []
    next_batch = trainer.started.rollouts.next_batch

    def recording_next_batch():  # noqa: ANN202
        batches.append(next_batch())
        return batches[-1]

    trainer.started.rollouts.next_batch = recording_next_batch
    metrics = trainer.trainer.run_step().metrics
    rollout = batches[0].rollout
    lengths = sequence_lengths(rollout.prompt_mask, rollout.response_mask)
    flops = 2 * (
        training_flops(trainer.parts.policy.config, lengths)
        + training_flops(trainer.parts.critic.config, lengths, head_outputs=1)
    )
    peak = device_peak(torch.device("cpu"), torch.float32).flops_per_s
    assert metrics["perf/mfu"] == pytest.approx(flops / metrics["time/update_s"] / peak)
    assert metrics["perf/update_tokens_per_s"] == pytest.approx(
        2 * sum(lengths) / metrics["time/update_s"]
    )
    sampled = int(rollout.response_mask.sum())
    assert metrics["perf/step_tokens_per_s"] == pytest.approx(sampled / metrics["perf/step_s"])


def test_measuring_the_peak_leaves_the_global_random_stream_alone() -> None:
    from astrai.training.device_peak import measured_peak

    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    measured_peak(torch.device("cpu"), torch.float32)
    assert torch.equal(torch.rand(4), expected)
