"""Where responses are generated: the ``engine`` config group behind one small interface.

``engine=torch`` (the default, and the exact reference) is astrai's own KV-cache sampler
(``rollout.sampler.generate``) on the live policy: nothing to synchronise, the behaviour
logprobs are the trainer's own math. A generation engine that keeps its own copy of the weights
(vLLM, issue 34; a remote server) implements the same ``Engine`` protocol in a module of its
own: ``sample`` one group of responses per prompt, ``sync_weights`` after each update, ``close``
at the end. The trainer's rollouts and evaluation call only this interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from astrai.models.llama import LlamaForCausalLM
from astrai.rollout.sampler import Generation, SamplingConfig, generate

ENGINES = ("torch",)


class Engine(Protocol):
    """A generation engine: what rollouts and evaluation sample through."""

    name: str

    def sample(
        self,
        policy: LlamaForCausalLM,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        group_size: int,
        sampling: SamplingConfig,
        stop_ids: Sequence[int],
        pad_id: int,
        generator: torch.Generator | None = None,
        lockstep: bool = False,
        precision: str = "fp32",
    ) -> Generation:
        """``group_size`` responses to each of B left-padded prompts (``prompt_ids``,
        ``prompt_mask``: ``[B, P]``) -> a ``Generation`` of ``B * group_size`` rows, prompt-major
        (the rows of prompt b are ``b * G .. b * G + G - 1``), with the behaviour logprobs of
        the sampled tokens. ``generator``: the run's sampling stream; ``lockstep``: every rank
        decodes as many steps (a sharded policy); ``precision``: ``infra.precision``."""
        ...

    def sync_weights(self, policy: LlamaForCausalLM) -> float | None:
        """Bring the engine's weights up to ``policy``'s after an update: the seconds it took,
        or None for an engine that samples the live policy (nothing to sync, nothing logged)."""
        ...

    def close(self) -> None:
        """Free what the engine holds (its memory, its processes); idempotent."""
        ...


class TorchEngine:
    """astrai's own sampler on the live policy (``rollout.sampler.generate``)."""

    name = "torch"

    def sample(
        self,
        policy: LlamaForCausalLM,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        group_size: int,
        sampling: SamplingConfig,
        stop_ids: Sequence[int],
        pad_id: int,
        generator: torch.Generator | None = None,
        lockstep: bool = False,
        precision: str = "fp32",
    ) -> Generation:
        return generate(
            policy,
            prompt_ids.repeat_interleave(group_size, 0),
            prompt_mask.repeat_interleave(group_size, 0),
            sampling,
            eos_id=stop_ids,
            pad_id=pad_id,
            generator=generator,
            lockstep=lockstep,
            precision=precision,
        )

    def sync_weights(self, policy: LlamaForCausalLM) -> float | None:
        del policy  # it samples the live policy
        return None

    def close(self) -> None:
        pass


def build_engine(engine_cfg: Any) -> Engine:
    """The engine an ``engine`` config node names (validated: ``config.validate``)."""
    name = engine_cfg.name if engine_cfg is not None else "torch"
    if name == "torch":
        return TorchEngine()
    raise ValueError(f"engine={name} is not an engine (choose from {', '.join(ENGINES)})")
