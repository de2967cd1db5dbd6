"""Greedy evaluation on held-out problems: accuracy and mean reward under the run's reward."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from astrai.distributed import is_fsdp
from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import Tokenizer
from astrai.rewards.base import Reward
from astrai.rollout.collect import decode_responses, left_pad
from astrai.rollout.sampler import SamplingConfig, generate
from astrai.tasks.base import Problem


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
    reward: Reward,
    problems: list[Problem],
    max_new_tokens: int,
    batch_size: int = 512,
) -> EvalResult:
    """Greedy-decode every problem and score it; correct = the reward reaches the reward's
    ``accuracy_threshold``."""
    was_training = policy.training
    policy.eval()
    device = policy.lm_head.weight.device
    greedy = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0)
    sharded = is_fsdp(policy)
    responses: list[str] = []
    lengths: list[int] = []
    for start in range(0, len(problems), batch_size):
        chunk = [p.prompt for p in problems[start : start + batch_size]]
        ids, mask = left_pad(tokenizer, chunk, device)
        # a sharded policy gathers its weights in every decoding step: ranks stop together
        gen = generate(
            policy, ids, mask, greedy, tokenizer.stop_ids, tokenizer.pad_id, lockstep=sharded
        )
        responses += decode_responses(tokenizer, gen.response_ids, gen.response_mask)
        lengths += gen.response_mask.sum(-1).tolist()
    policy.train(was_training)
    texts = [p.text for p in problems]
    rewards, _ = reward.score(texts, responses, [p.answer for p in problems])
    correct = reward.correct(rewards)
    n = max(len(problems), 1)
    return EvalResult(
        accuracy=sum(correct) / n,
        reward_mean=sum(rewards) / n,
        response_len=sum(lengths) / n,
        samples=list(zip(texts, responses, rewards, strict=True)),
    )
