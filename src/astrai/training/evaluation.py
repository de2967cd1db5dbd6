"""Greedy evaluation on held-out prompts: exact-match accuracy and partial-credit reward."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.collect import decode_responses, left_pad
from astrai.rollout.sampler import SamplingConfig, generate
from astrai.tasks.base import Task


@dataclass
class EvalResult:
    accuracy: float
    reward_mean: float
    response_len: float
    samples: list[tuple[str, str, float]]  # (prompt, greedy response, reward)

    def metrics(self) -> dict[str, float]:
        return {
            "eval/accuracy": self.accuracy,
            "eval/reward_mean": self.reward_mean,
            "eval/response_len": self.response_len,
        }


@torch.no_grad()
def evaluate(
    policy: LlamaForCausalLM,
    tokenizer: Tokenizer,
    task: Task,
    prompts: list[str],
    max_new_tokens: int,
    batch_size: int = 512,
) -> EvalResult:
    """Greedy-decode every prompt and grade it with the task's exact-match check."""
    was_training = policy.training
    policy.eval()
    device = policy.lm_head.weight.device
    greedy = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0)
    responses: list[str] = []
    lengths: list[int] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        ids, mask = left_pad(tokenizer, chunk, device)
        gen = generate(policy, ids, mask, greedy, tokenizer.eos_id, tokenizer.pad_id)
        responses += decode_responses(tokenizer, gen.response_ids, gen.response_mask)
        lengths += gen.response_mask.sum(-1).tolist()
    policy.train(was_training)
    rewards = [task.reward(p, r) for p, r in zip(prompts, responses, strict=True)]
    correct = [task.is_correct(p, r) for p, r in zip(prompts, responses, strict=True)]
    n = max(len(prompts), 1)
    return EvalResult(
        accuracy=sum(correct) / n,
        reward_mean=sum(rewards) / n,
        response_len=sum(lengths) / n,
        samples=list(zip(prompts, responses, rewards, strict=True)),
    )
