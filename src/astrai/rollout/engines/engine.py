"""Where responses are generated: the ``engine`` config group behind one small interface.

An engine is a subclass of ``Engine`` named by ``engine._target_`` (``conf/engine/<name>.yaml``)
and built by ``build_engine`` with what it needs: its own knobs (``Engine.Config``, a dataclass on
the class from which the config schema is derived), the policy (a live module to sample, or the
weights to start its own copy from), the tokenizer and the run's precision. After that it samples
with data only (``sample``: prompt tokens, masks, group size, sampling settings, stop ids, the
random stream) and takes named tensors after each update (``sync_weights``). What differs per
engine is said by class attributes (``samples_live_policy``, ``supports_seeds``,
``supports_prefix_continuation``) and one ``check`` that both config validation and
``astrai.generate`` call.

``engine=torch`` (the default, and the exact reference) is astrai's own KV-cache sampler
(``rollout.engines.sampler.generate``) on the live policy: nothing to synchronise, the behaviour
logprobs are the trainer's own math. ``engine=vllm`` is ``rollout.engines.seeded_vllm.SeededVLLM``.
A further engine is one module and one YAML (docs/engines.md, "Writing an engine").
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn

from astrai.distributed import all_reduce_max, is_fsdp
from astrai.imports import import_target
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.pass_memory import kv_bytes_per_token, rows_per_pass, token_budget
from astrai.models.precision import compute_dtype
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.engines.sampler import Generation, SamplingConfig, generate

# what ``weights`` may be: a state dict, or (name, tensor) pairs streamed one at a time
NamedTensors = Mapping[str, Tensor] | Iterable[tuple[str, Tensor]]


def knob(default: Any, *, choices: Sequence[Any] | None = None, **bounds: Any) -> Any:
    """A field of an engine's ``Config`` with its default and what values it takes: ``choices``,
    or ``bounds`` as ``config.ranges.check_number`` reads them (``low``, ``high``, ``low_open``,
    ``high_open``, ``integer``, ``optional``). Config validation checks them for every engine
    (``config.engine_checks``); a ``bool`` field is checked to be true or false."""
    metadata = {"choices": tuple(choices)} if choices is not None else {"bounds": bounds}
    return field(default=default, metadata=metadata)


@dataclass
class NoKnobs:
    """The knobs of an engine that has none of its own (``Engine.Config``)."""


@dataclass(frozen=True)
class EngineJob:
    """What an engine's ``check`` reads of the job it is to serve; None where not known (yet):
    ``astrai.generate`` checks before the model loads and again with it.

    Attributes:
        device: the planned device (``cpu``, ``cuda``, ``cuda:1``); None where a container
            decides.
        model: the policy's architecture (head size, positions).
        longest_prompt: the longest prompt in tokens, BOS included; None: any prompt that fits
            the model (a dataset).
        max_new_tokens: the longest response in tokens.
        world_size: the processes that sample, one engine each.
        parallel: ``infra.parallel`` (``ddp`` replicas or ``fsdp`` shards).
        command_line: ``astrai.generate`` asks: refusals name its flags (``--engine vllm``,
            ``--device``) instead of config keys.
    """

    device: str | None = None
    model: LlamaConfig | None = None
    longest_prompt: int | None = None
    max_new_tokens: int | None = None
    world_size: int | None = 1
    parallel: str = "ddp"
    command_line: bool = False

    def engine(self, name: str) -> str:
        """How this job's user selected the engine ``name``: ``engine=vllm`` or
        ``--engine vllm``."""
        return f"--engine {name}" if self.command_line else f"engine={name}"


class Engine(ABC):
    """A generation engine: what rollouts, evaluation and ``astrai.generate`` sample through.

    Subclasses set the class attributes, may add knobs (``Config``) and a ``check``, and
    implement ``sample``; an engine with its own copy of the weights implements
    ``sync_weights``."""

    name: ClassVar[str]  # the engine's label in messages and logs (``engine=<name>``)
    # it samples the module it was built with (the live policy: nothing to sync; with
    # max_policy_lag > 0 the sampling thread hands it a snapshot, ``on``); False: it owns a copy
    # of the weights, loaded by ``sync_weights`` after each update
    samples_live_policy: ClassVar[bool] = False
    # each prompt's draws depend on its own seed (drawn from the run's stream), not on the other
    # prompts of the batch it is sampled with
    supports_seeds: ClassVar[bool] = False
    # a prompt may be any token prefix (earlier turns' sampled tokens and observations), taken
    # as the ids it is given, never re-tokenised: what a multi-turn episode continues from
    supports_prefix_continuation: ClassVar[bool] = False

    # the engine's own knobs: a dataclass whose fields are its keys of the ``engine`` node,
    # each a ``knob``; the config schema is derived from it (``config.schema.engine_schema``)
    Config: ClassVar[type[Any]] = NoKnobs

    @property
    def max_model_len(self) -> int | None:
        """The longest prompt + response one request may hold where the engine bounds it below
        the model's positions (vLLM's ``engine.max_model_len``); None: the model's positions."""
        return None

    def __init__(
        self, config: Any, policy: nn.Module, tokenizer: Tokenizer, precision: str = "fp32"
    ) -> None:
        """The engine, started.

        Args:
            config: this class's ``Config``, filled from the ``engine`` node.
            policy: the policy (an engine that samples it keeps it; one with its own weights
                starts from them and keeps nothing).
            tokenizer: its ``pad_id`` fills the responses past their end.
            precision: the trainer's ``infra.precision`` (``fp32``, ``bf16``).
        """
        self.config = config
        self.pad_id = tokenizer.pad_id
        self.precision = precision

    @classmethod
    def check(cls, node: Mapping[str, Any], job: EngineJob) -> None:
        """ValueError, one line naming the key or flag, when this engine cannot serve ``job``
        with the knobs of ``node`` (the ``engine`` node; their types and ranges are checked
        beforehand from ``Config``). Starts nothing; the default refuses nothing."""
        del node, job

    @abstractmethod
    def sample(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        group_size: int,
        sampling: SamplingConfig,
        stop_ids: Sequence[int],
        generator: torch.Generator | None = None,
    ) -> Generation:
        """``group_size`` responses to each of B left-padded prompts.

        Args:
            prompt_ids: ``[B, P]`` prompt tokens, left-padded.
            prompt_mask: ``[B, P]`` bool, True on real prompt tokens.
            group_size: G, responses per prompt.
            sampling: temperature (0: greedy), top-k, top-p, ``max_new_tokens``.
            stop_ids: the ids that end a response (kept in it, masked in).
            generator: the run's sampling stream (None: greedy evaluation, or the engine's own).

        Returns:
            A ``Generation`` of ``B * G`` rows, prompt-major (prompt b's rows are
            ``b * G .. b * G + G - 1``): ``response_ids [B*G, R]`` (``pad_id`` after the end),
            ``response_mask`` (True through the stop token) and the behaviour ``logprobs`` of
            the sampled tokens under the temperature-scaled distribution (0 at padding).
        """

    def sync_weights(self, weights: NamedTensors) -> float:
        """Load the policy's updated weights (Hugging Face names, ``models.weights.
        named_weights``: a tied ``lm_head`` is not a tensor of its own) into the engine's copy;
        the seconds it took. Called by the trainer after each update, for an engine that does
        not sample the live policy only."""
        raise NotImplementedError(f"engine={self.name} samples the live policy: nothing to sync")

    def before_update(self) -> None:
        """Called by the trainer before its update (this step's rollout is sampled) when nothing
        samples during the update: an engine beside the update on one device releases its
        memory here (vLLM's sleep mode on CUDA; ``sync_weights`` takes it back)."""
        return None  # nothing to do by default

    def after_update(self) -> None:
        """Called by the trainer after its update, before ``sync_weights`` (when it called
        ``before_update``)."""
        return None  # nothing to do by default

    def on(self, module: nn.Module) -> Engine:
        """This engine sampling ``module``, a snapshot of the policy a sampling thread owns
        (``max_policy_lag`` > 0): itself for an engine with its own weights."""
        del module
        return self

    def close(self) -> None:
        """Free what the engine holds (its memory, its processes); idempotent."""
        return None  # nothing to do by default


def named_tensors(weights: NamedTensors) -> Iterable[tuple[str, Tensor]]:
    """``weights`` as ``(name, tensor)`` pairs, streamed as given."""
    return weights.items() if isinstance(weights, Mapping) else weights


class TorchEngine(Engine):
    """astrai's own sampler on the live policy (``rollout.engines.sampler.generate``): each prompt
    repeated ``group_size`` times, drawn from the run's sampling stream, in the trainer's
    precision, in lockstep over the ranks of a sharded policy."""

    name = "torch"
    samples_live_policy = True
    supports_seeds = False  # one stream for the batch: a row's draws depend on the batch
    supports_prefix_continuation = True  # prompts are token ids, decoded from where they end

    def __init__(
        self,
        config: Any,
        policy: nn.Module,
        tokenizer: Tokenizer,
        precision: str = "fp32",
        lockstep: bool | None = None,
    ) -> None:
        """``lockstep``: every rank decodes as many steps (None: whether ``policy`` is
        sharded, whose gathers are collectives every rank must join)."""
        super().__init__(config, policy, tokenizer, precision)
        self.policy = policy
        self.lockstep = is_fsdp(policy) if lockstep is None else lockstep

    def sample(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        group_size: int,
        sampling: SamplingConfig,
        stop_ids: Sequence[int],
        generator: torch.Generator | None = None,
    ) -> Generation:
        """The rows (each prompt ``group_size`` times) in chunks of ``chunk_rows``, one after
        the other from the same stream; one chunk (the whole batch) where it fits."""
        ids = prompt_ids.repeat_interleave(group_size, 0)
        mask = prompt_mask.repeat_interleave(group_size, 0)
        size = self.chunk_rows(ids.shape[0], ids.shape[1], group_size, sampling)
        chunks = [
            generate(
                self.policy,  # type: ignore[arg-type]
                chunk_ids,
                chunk_mask,
                sampling,
                eos_id=stop_ids,
                pad_id=self.pad_id,
                generator=generator,
                lockstep=self.lockstep,
                precision=self.precision,
            )
            for chunk_ids, chunk_mask in zip(ids.split(size), mask.split(size), strict=True)
        ]
        return chunks[0] if len(chunks) == 1 else concat_generations(chunks, self.pad_id)

    def chunk_rows(
        self, rows: int, prompt_len: int, group_size: int, sampling: SamplingConfig
    ) -> int:
        """Rows one sampling chunk holds under ``sampling.max_cache_tokens`` (``auto``: from the
        device's memory and the policy's KV bytes per token). In lockstep the ranks size their
        chunks by the longest prompt of any rank, so every rank runs as many chunks."""
        policy = cast(LlamaForCausalLM, self.policy)
        weight = policy.lm_head.weight
        dtype = compute_dtype(self.precision, weight.dtype)
        per_token = kv_bytes_per_token(policy.config, dtype)
        budget = token_budget(sampling.max_cache_tokens, per_token, weight.device)
        if self.lockstep and budget is not None:
            prompt_len = int(all_reduce_max(float(prompt_len)))
        return rows_per_pass(budget, prompt_len + sampling.max_new_tokens, rows, group_size)

    def sync_weights(self, weights: NamedTensors) -> float:
        del weights  # it samples the live policy
        return 0.0

    def on(self, module: nn.Module) -> Engine:
        if module is self.policy:
            return self
        other = copy.copy(self)
        other.policy = module
        return other


def concat_generations(parts: Sequence[Generation], pad_id: int) -> Generation:
    """The rows of ``parts`` in order, right-padded to the longest response (``pad_id``, mask
    False, logprob 0)."""
    width = max(part.response_ids.shape[1] for part in parts)

    def padded(t: Tensor, value: float | int) -> Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

    return Generation(
        torch.cat([padded(part.response_ids, pad_id) for part in parts]),
        torch.cat([padded(part.response_mask, False) for part in parts]),
        torch.cat([padded(part.logprobs, 0.0) for part in parts]),
    )


def torch_engine(
    policy: nn.Module, tokenizer: Tokenizer, precision: str = "fp32", lockstep: bool | None = None
) -> TorchEngine:
    """The torch sampler on ``policy``: what rollouts and evaluation use when handed no
    engine."""
    return TorchEngine(TorchEngine.Config(), policy, tokenizer, precision, lockstep)


def engine_class(node: Mapping[str, Any] | None) -> type[Engine]:
    """The ``Engine`` subclass ``node["_target_"]`` names (None: ``TorchEngine``); ValueError,
    one line naming ``engine._target_``, when it cannot be imported or is not an engine."""
    if node is None:
        return TorchEngine
    return import_target(  # type: ignore[no-any-return]
        node.get("_target_"),
        "engine._target_",
        Engine,
        "an engine (a subclass of astrai.rollout.engines.engine.Engine;"
        " select one with engine=<name>)",
    )


def engine_knobs(cls: type[Engine], node: Mapping[str, Any] | None) -> dict[str, Any]:
    """The values of ``cls.Config``'s knobs in ``node`` (absent ones keep their defaults)."""
    if node is None:
        return {}
    return {f.name: node[f.name] for f in fields(cls.Config) if f.name in node}


def build_engine(
    node: Mapping[str, Any] | None,
    policy: nn.Module,
    tokenizer: Tokenizer,
    precision: str = "fp32",
) -> Engine:
    """The engine the ``engine`` node names (``_target_``; None: the torch sampler), built with
    its knobs, the policy, the tokenizer and the trainer's ``precision``. The node is validated
    beforehand (``config.validate``; ``astrai.generate`` checks its own)."""
    cls = engine_class(node)
    return cls(cls.Config(**engine_knobs(cls, node)), policy, tokenizer, precision)
