"""The step's throughput metrics that compare across runs and codebases: ``perf/mfu`` and
``perf/update_tokens_per_s`` of the update, ``perf/step_tokens_per_s`` of the whole step.

The update trains every sequence of the rollout (prompt and response: the forward pass reads
both) once per epoch, the policy and PPO's critic each (``models.flops``); MFU is those model
FLOPs over the update's seconds and the device's peak (``training.device_peak``). Every number is
this rank's: its share of the batch on its own device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from astrai.models.flops import training_flops
from astrai.models.llama import LlamaConfig
from astrai.models.precision import compute_dtype
from astrai.rollout.rollout import Rollout
from astrai.training.device_peak import DevicePeak, device_peak


@dataclass(frozen=True)
class UpdateShape:
    """What the update's FLOPs depend on beyond the batch: the policy's and the critic's
    (PPO; None otherwise) architectures and the epochs over the batch."""

    policy: LlamaConfig
    critic: LlamaConfig | None
    epochs: int


def sequence_lengths(prompt_mask: torch.Tensor, response_mask: torch.Tensor) -> list[int]:
    """``prompt_mask [B, P]`` and ``response_mask [B, G, R]`` (True = a real token) -> the
    ``B·G`` trained sequences' lengths, prompt plus response."""
    prompts = prompt_mask.sum(-1)  # [B]
    responses = response_mask.sum(-1)  # [B, G]
    return (prompts[:, None] + responses).flatten().tolist()


def update_flops(shape: UpdateShape, lengths: list[int]) -> float:
    """Model FLOPs of the update over sequences of ``lengths`` tokens."""
    flops = training_flops(shape.policy, lengths)
    if shape.critic is not None:
        flops += training_flops(shape.critic, lengths, head_outputs=1)
    return shape.epochs * flops


def throughput_metrics(
    shape: UpdateShape,
    lengths: list[int],
    response_tokens: int,
    update_s: float,
    step_s: float,
    peak: DevicePeak,
) -> dict[str, float]:
    """``perf/mfu`` (the update's model FLOPs over ``update_s`` × the peak),
    ``perf/update_tokens_per_s`` (sequence tokens trained, epochs counted, per second of the
    update) and ``perf/step_tokens_per_s`` (response tokens sampled per wall second of the
    step, everything in it)."""
    update_s, step_s = max(update_s, 1e-9), max(step_s, 1e-9)
    return {
        "perf/mfu": update_flops(shape, lengths) / update_s / peak.flops_per_s,
        "perf/update_tokens_per_s": shape.epochs * sum(lengths) / update_s,
        "perf/step_tokens_per_s": response_tokens / step_s,
    }


def step_throughput(
    shape: UpdateShape, rollout: Rollout, update_s: float, step_s: float, precision: str
) -> dict[str, float]:
    """``throughput_metrics`` of one step's ``rollout`` (on its device), against the device's
    peak in the update's precision (``infra.precision``, float32 weights)."""
    device = rollout.response_ids.device
    peak = device_peak(device, compute_dtype(precision, torch.float32))
    lengths = sequence_lengths(rollout.prompt_mask, rollout.response_mask)
    sampled = int(rollout.action_mask().sum())
    return throughput_metrics(shape, lengths, sampled, update_s, step_s, peak)
