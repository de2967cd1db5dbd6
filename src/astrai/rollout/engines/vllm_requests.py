"""What a vLLM request carries and what its answer becomes (``InProcessVLLM.sample``, in
``in_process_vllm``): astrai's sampling settings as ``vllm.SamplingParams``, and the
completions' token ids and logprobs packed into a right-padded ``Generation``, as
``sampler.generate`` returns it.

vLLM is imported only inside these functions, so importing astrai never needs it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from astrai.rollout.engines.sampler import Generation, SamplingConfig


def sampling_params(
    sampling: SamplingConfig, n: int, stop_ids: Sequence[int], seed: int | None
) -> Any:
    """``vllm.SamplingParams`` for ``n`` responses to one prompt, drawn as astrai's sampler
    draws them (``seed``: the request's own stream; None, the engine's)."""
    from vllm import SamplingParams

    return SamplingParams(
        n=n,
        temperature=max(sampling.temperature, 0.0),  # vLLM: 0 = greedy, as astrai
        top_k=sampling.top_k,  # 0 = off in both
        top_p=sampling.top_p,
        max_tokens=sampling.max_new_tokens,
        # astrai stops only at its stop ids: the model's EOS ends a response only when listed
        stop_token_ids=list(stop_ids),
        ignore_eos=True,
        logprobs=0,  # the sampled token's only
        seed=seed,
        detokenize=False,
    )


def sampled_logprobs(ids: list[int], logprobs: Any) -> list[float]:
    """The logprob of each sampled token from vLLM's per-position ``{token_id: Logprob}``."""
    if logprobs is None or len(logprobs) != len(ids):
        raise RuntimeError(
            f"vLLM returned {None if logprobs is None else len(logprobs)} logprob entries "
            f"for {len(ids)} tokens"
        )
    return [position[token].logprob for token, position in zip(ids, logprobs, strict=True)]


def pack_generation(
    rows: list[tuple[list[int], list[float]]], pad_id: int, device: torch.device
) -> Generation:
    """``(ids, logprobs)`` per response -> a right-padded ``Generation`` ``[N, R]``."""
    width = max(len(ids) for ids, _ in rows)
    n = len(rows)
    response_ids = torch.full((n, width), pad_id, dtype=torch.long, device=device)
    response_mask = torch.zeros(n, width, dtype=torch.bool, device=device)
    logprobs = torch.zeros(n, width, dtype=torch.float32, device=device)
    for i, (ids, values) in enumerate(rows):
        response_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long, device=device)
        response_mask[i, : len(ids)] = True
        logprobs[i, : len(ids)] = torch.tensor(values, dtype=torch.float32, device=device)
    return Generation(response_ids, response_mask, logprobs)
