"""Turn problems into a scored ``Rollout``: tokenize, sample G responses each, decode, reward."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from astrai.chat import Prompt
from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import Tokenizer
from astrai.rewards.base import Reward
from astrai.rewards.overlong import OVERLONG_TERM, OverlongPenalty
from astrai.rollout.engines.engine import Engine, torch_engine
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.rollout import Rollout
from astrai.tasks.base import Problem


def left_pad(
    tokenizer: Tokenizer, prompts: Sequence[Prompt], device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """Encode ``prompts`` (with BOS / chat template) into left-padded ``[N, P]`` ids and a
    bool mask."""
    encoded = [tokenizer.encode_prompt(p) for p in prompts]
    width = max(len(e) for e in encoded)
    ids = torch.full((len(prompts), width), tokenizer.pad_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.bool)
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


def rendered_prompt(tokenizer: Tokenizer, prompt: Prompt) -> str:
    """The prompt's text as ``tokenizer`` renders it for the policy: the chat template with
    its generation prompt (an HF tokenizer), or the string itself (no template; a BOS the
    tokenizer adds as an id is no text)."""
    render = getattr(tokenizer, "render_prompt", None)  # HFTokenizer's; CharTokenizer has none
    if callable(render):
        return str(render(prompt))
    if not isinstance(prompt, str):
        raise ValueError("chat messages need a tokenizer with a chat template")
    return prompt


def prompt_context(
    reward: Reward, problems: Sequence[Problem], tokenizer: Tokenizer | None
) -> dict[str, list[Any]]:
    """What ``reward``'s terms ask for of ``PROMPT_CONTEXT``, one entry per problem: each
    problem's ``messages``, and its ``rendered_prompt`` (which needs ``tokenizer``). Empty for a
    reward whose terms take the three lists only, so nothing is rendered twice for it."""
    context: dict[str, list[Any]] = {}
    if "messages" in reward.takes:
        context["messages"] = [p.messages for p in problems]
    if "rendered_prompts" in reward.takes:
        if tokenizer is None:
            raise ValueError("a reward term takes rendered_prompts: pass the policy's tokenizer")
        context["rendered_prompts"] = [rendered_prompt(tokenizer, p.prompt) for p in problems]
    return context


def score_responses(
    reward: Reward,
    problems: list[Problem],
    responses: list[list[str]],
    tokenizer: Tokenizer | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """``[B, G]`` total reward of every response and each term's ``[B, G]`` scores, from one
    batched call per term; ``RewardError`` (naming the prompt) on a bad score. ``tokenizer``:
    the policy's, for a term that takes ``rendered_prompts``."""
    b = len(problems)
    sizes = [len(group) for group in responses]
    flat = [(p, r) for p, group in zip(problems, responses, strict=True) for r in group]
    # each problem's context once per response, like its text
    context = {
        key: [value for value, size in zip(values, sizes, strict=True) for _ in range(size)]
        for key, values in prompt_context(reward, problems, tokenizer).items()
    }
    totals, terms = reward.score(
        [p.text for p, _ in flat], [r for _, r in flat], [p.answer for p, _ in flat], **context
    )
    grids = {name: torch.tensor(v, dtype=torch.float32).view(b, -1) for name, v in terms.items()}
    return torch.tensor(totals, dtype=torch.float32).view(b, -1), grids


@contextlib.contextmanager
def sampling_mode(policy: LlamaForCausalLM, engine: Engine | None) -> Iterator[None]:
    """Evaluation mode (no dropout) on ``policy`` while ``engine`` samples it, its mode restored
    after: only for an engine that samples the module it is handed (``engine`` None, or one
    whose ``samples_live_policy``: the torch sampler), a module the calling thread owns (the
    live policy on the training thread, or a sampling thread's snapshot). An engine with its
    own copy of the weights (vLLM) does not sample ``policy``: its mode is left alone, since
    that caller may be the sampling thread while the training thread updates the live policy
    in train mode."""
    if engine is not None and not engine.samples_live_policy:
        yield
        return
    was_training = policy.training
    policy.eval()
    try:
        yield
    finally:
        policy.train(was_training)


def collect_rollout(
    policy: LlamaForCausalLM,
    tokenizer: Tokenizer,
    problems: list[Problem],
    group_size: int,
    sampling: SamplingConfig,
    reward: Reward,
    policy_version: int,
    generator: torch.Generator | None = None,
    lockstep: bool = False,
    overlong: OverlongPenalty | None = None,
    precision: str = "fp32",
    engine: Engine | None = None,
) -> Rollout:
    """Sample ``group_size`` responses for each of B problems with ``engine`` (default: the
    torch sampler on ``policy``, in ``precision``, in ``lockstep``: see ``generate``) and
    score them.

    ``overlong`` (training rollouts only): DAPO's soft overlong penalty on each response's
    length in tokens (EOS included), added to ``rewards`` and kept as the reward term
    ``overlong`` (logged as ``reward/overlong``)."""
    device = policy.lm_head.weight.device
    prompt_ids, prompt_mask = left_pad(tokenizer, [p.prompt for p in problems], device)
    engine = engine or torch_engine(policy, tokenizer, precision, lockstep)
    with sampling_mode(policy, engine):
        gen = engine.sample(
            prompt_ids, prompt_mask, group_size, sampling, tokenizer.stop_ids, generator
        )
    b, g = len(problems), group_size
    texts = decode_responses(tokenizer, gen.response_ids, gen.response_mask)
    responses = [texts[i * g : (i + 1) * g] for i in range(b)]
    rewards, terms = score_responses(reward, problems, responses, tokenizer)
    response_mask = gen.response_mask.view(b, g, -1)
    if overlong is not None:
        if OVERLONG_TERM in terms:
            raise ValueError(f"a reward term is already named {OVERLONG_TERM!r}")
        penalty = overlong(response_mask.sum(-1).cpu())
        rewards = rewards + penalty
        terms[OVERLONG_TERM] = penalty
    return Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=gen.response_ids.view(b, g, -1),
        response_mask=response_mask,
        logprobs=gen.logprobs.view(b, g, -1),
        rewards=rewards.to(device),
        policy_version=policy_version,
        sample_versions=torch.full((b, g), policy_version, dtype=torch.long, device=device),
        token_versions=torch.where(response_mask, policy_version, -1),  # -1: padding
        prompts=[p.text for p in problems],
        responses=responses,
        reward_terms={name: scores.to(device) for name, scores in terms.items()},
    )
