"""Greedy evaluation on held-out problems: accuracy and mean reward under the run's reward.

Under a process group each rank decodes its share of the problems and the totals are summed
over all ranks (``astrai.training.eval_metrics``, a torchmetrics ``Metric``): every rank returns
the global values, each problem weighing the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from astrai.distributed import is_fsdp, rank, world_size
from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import Tokenizer
from astrai.rewards.base import Reward
from astrai.rollout.collect import sampling_mode
from astrai.rollout.collectors import Collector, CollectorParts, SingleTurnCollector
from astrai.rollout.engines.engine import Engine, torch_engine
from astrai.rollout.engines.sampler import SamplingConfig
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
    *,
    shard: bool = True,
    precision: str = "fp32",
    engine: Engine | None = None,
    collector: Collector | None = None,
) -> EvalResult:
    """Greedy-decode the problems in ``precision`` (``infra.precision``, as the run's rollouts
    decode) and score them; correct = the reward reaches the reward's ``accuracy_threshold``.

    Args:
        problems: with ``shard`` (the default), the held-out list, the same on every rank: this
            rank decodes every ``world_size``-th problem from its rank on. Without, this rank's
            own problems (under a sharded policy every rank must then run as many batches).
        shard: split ``problems`` over the ranks (no-op in one process).
        engine: what decodes (default: the torch sampler on ``policy``).
        collector: how each problem is answered and scored (``Collector.evaluate``; default:
            one answer per prompt, scored by ``reward``); the run's: ``BuiltRun.collector``.

    Returns:
        The metrics over every rank's problems (synchronised under a process group: every rank
        must call this); ``samples`` are this rank's own rows.
    """
    problems, weights = rank_share(problems) if shard else (problems, [1.0] * len(problems))
    device = policy.lm_head.weight.device
    greedy = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0)
    # a sharded policy gathers its weights in every decoding step: ranks stop together
    engine = engine or torch_engine(policy, tokenizer, precision, lockstep=is_fsdp(policy))
    collector = collector or SingleTurnCollector(
        CollectorParts(tokenizer, reward, policy.config.max_position_embeddings)
    )
    with sampling_mode(policy, engine):  # eval mode, where the torch sampler decodes it
        responses, lengths, rewards, correct = collector.evaluate(
            engine, problems, greedy, batch_size, device
        )
    texts = [p.text for p in problems]
    totals = weighted_totals(correct, rewards, lengths, weights)
    if world_size() > 1:
        # torchmetrics only here: one process pays neither its import nor a collective (also
        # where a one-rank process group exists: vLLM's own on CUDA, astrai.distributed)
        from astrai.training.eval_metrics import sum_over_ranks

        totals = sum_over_ranks(totals)
    n_correct, reward_sum, length_sum, count = totals.tolist()
    n = max(count, 1.0)  # 0.0 for every metric when no rank had a problem
    rows = zip(texts, responses, rewards, weights, strict=True)
    return EvalResult(
        accuracy=n_correct / n,
        reward_mean=reward_sum / n,
        response_len=length_sum / n,
        samples=[(text, response, r) for text, response, r, w in rows if w > 0],
    )


def weighted_totals(
    correct: list[bool], rewards: list[float], lengths: list[int], weights: list[float]
) -> torch.Tensor:
    """``[4]`` float64: the weighted sums of correct answers, rewards and response lengths, and
    of the weights themselves (the number of problems; a pad row weighs 0)."""
    rows = torch.tensor([correct, rewards, lengths, [1.0] * len(weights)], dtype=torch.float64)
    return (rows * torch.tensor(weights, dtype=torch.float64)).sum(dim=1)


def rank_share(problems: list[Problem]) -> tuple[list[Problem], list[float]]:
    """This rank's problems and their weights: every ``world_size``-th from its rank on, padded
    with weight-0 repeats to ``ceil(len / world_size)`` rows, so that every rank decodes the
    same batches (a sharded policy's decoding steps are collectives all ranks join)."""
    world = world_size()
    if world == 1 or not problems:
        return problems, [1.0] * len(problems)
    rows = -(-len(problems) // world)
    indices = range(rank(), rows * world, world)
    mine = [problems[i % len(problems)] for i in indices]
    return mine, [1.0 if i < len(problems) else 0.0 for i in indices]
