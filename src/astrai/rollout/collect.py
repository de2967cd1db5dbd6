"""Turn prompts into a scored ``Rollout``: tokenize, sample G responses each, decode, reward."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.rollout import Rollout
from astrai.rollout.sampler import SamplingConfig, generate


class RewardError(RuntimeError):
    """A reward function raised or returned a non-finite value; names the prompt."""


def left_pad(
    tokenizer: Tokenizer, texts: list[str], device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """Encode ``texts`` (with BOS) into left-padded ``[N, P]`` ids and a bool mask."""
    encoded = [tokenizer.encode_prompt(t) for t in texts]
    width = max(len(e) for e in encoded)
    ids = torch.full((len(texts), width), tokenizer.pad_id, dtype=torch.long)
    mask = torch.zeros(len(texts), width, dtype=torch.bool)
    for row, seq in enumerate(encoded):
        ids[row, width - len(seq) :] = torch.tensor(seq)
        mask[row, width - len(seq) :] = True
    return ids.to(device), mask.to(device)


def decode_responses(
    tokenizer: Tokenizer, response_ids: Tensor, response_mask: Tensor
) -> list[str]:
    """``[N, R]`` responses -> texts without specials (EOS dropped, padding ignored)."""
    rows = response_ids.tolist()
    lengths = response_mask.sum(-1).tolist()
    return [tokenizer.decode(row[:length]) for row, length in zip(rows, lengths, strict=True)]


def score_responses(
    reward_fn: Callable[[str, str], float], prompts: list[str], responses: list[list[str]]
) -> Tensor:
    """Task reward of every response: ``[B, G]`` float tensor; non-finite or raising is fatal."""
    rewards = []
    for prompt, group in zip(prompts, responses, strict=True):
        row = []
        for response in group:
            try:
                value = float(reward_fn(prompt, response))
            except Exception as err:
                raise RewardError(f"reward function failed on prompt {prompt!r}: {err}") from err
            if not math.isfinite(value):
                raise RewardError(f"reward function returned {value} on prompt {prompt!r}")
            row.append(value)
        rewards.append(row)
    return torch.tensor(rewards, dtype=torch.float32)


def collect_rollout(
    policy: LlamaForCausalLM,
    tokenizer: Tokenizer,
    prompts: list[str],
    group_size: int,
    sampling: SamplingConfig,
    reward_fn: Callable[[str, str], float],
    policy_version: int,
    generator: torch.Generator | None = None,
    lockstep: bool = False,
) -> Rollout:
    """Sample ``group_size`` responses for each of B prompts and score them (``lockstep``:
    see ``generate``)."""
    device = policy.lm_head.weight.device
    prompt_ids, prompt_mask = left_pad(tokenizer, prompts, device)
    was_training = policy.training
    policy.eval()
    gen = generate(
        policy,
        prompt_ids.repeat_interleave(group_size, 0),
        prompt_mask.repeat_interleave(group_size, 0),
        sampling,
        eos_id=tokenizer.eos_id,
        pad_id=tokenizer.pad_id,
        generator=generator,
        lockstep=lockstep,
    )
    policy.train(was_training)
    b, g = len(prompts), group_size
    texts = decode_responses(tokenizer, gen.response_ids, gen.response_mask)
    responses = [texts[i * g : (i + 1) * g] for i in range(b)]
    rewards = score_responses(reward_fn, prompts, responses).to(device)
    return Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=gen.response_ids.view(b, g, -1),
        response_mask=gen.response_mask.view(b, g, -1),
        logprobs=gen.logprobs.view(b, g, -1),
        rewards=rewards,
        policy_version=policy_version,
        prompts=list(prompts),
        responses=responses,
    )
