"""``engine=vllm``'s knobs, and what they resolve to on the device the run samples on.

The defaults follow the anchors' colocated vLLM on a GPU (TRL's ``vllm_mode="colocate"``,
verl's rollout worker), and keep the CPU build's behaviour where those do not apply:

- ``dtype``: the trainer's precision (``infra.precision``: fp32 -> float32, bf16 -> bfloat16):
  an fp32 engine on a GPU holds twice the weights and KV cache and takes no FlashAttention.
- ``enforce_eager``: CUDA graphs on CUDA (TRL leaves them on); the CPU build is eager anyway.
- ``max_num_batched_tokens``: 4,096 on CUDA (TRL pins it: "vLLM v1 memory profiler is misled by
  the high default"); vLLM's own on the CPU.
- ``sleep_mode``: on CUDA the engine sleeps (level 2: weights and KV cache released) through the
  update and wakes for the weight sync (weights first, then the KV cache, TRL's order). vLLM's
  sleep mode exists on CUDA only.
- ``exact``: a seed on every request, drawn from the run's sampling stream, so a resumed run
  draws what the straight run drew. vLLM's sampler then takes its one-request-at-a-time path
  (vLLM's own comment in ``vllm/v1/sample/ops/topk_topp_sampler.py``), so on CUDA the default
  is off: exact resume of the sampled tokens is the price of speed there, and a choice.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from astrai.models.precision import DTYPES, PRECISION_DTYPE_NAMES
from astrai.rollout.engines.engine import knob

MAX_ENGINE_SEED = 2**62  # config.ranges.MAX_SEED: the run's seed, which engine.seed defaults to
CUDA_BATCHED_TOKENS = 4096  # TRL's max_num_batched_tokens in colocate mode
SLEEP_LEVEL = 2  # weights discarded too: the sync after the update reloads them all


@dataclass
class VLLMEngineConfig:
    """The engine's knobs: ``engine=vllm``'s own keys, written once (``SeededVLLM.Config``:
    the config schema and the checks of their values derive from these fields). None / ``auto``
    is resolved per device by ``resolve`` (module docstring).

    Attributes:
        dtype: the engine's weights and activations ("float32", "bfloat16", "float16"), or
            "auto": the trainer's ``infra.precision``.
        max_model_len: the longest prompt + response a request may hold (tokens); None = the
            policy's ``max_position_embeddings``.
        kv_cache_space_gib: ``VLLM_CPU_KVCACHE_SPACE``, the CPU build's KV-cache budget (GiB).
        gpu_memory_utilization: on CUDA, the share of the GPU's memory vLLM may take for its
            weights and KV cache, in (0, 1]; the CPU build ignores it.
        max_num_batched_tokens: the tokens one engine step schedules; None: 4,096 on CUDA,
            vLLM's own on the CPU.
        enforce_eager: no CUDA graphs; None: on the CPU (eager anyway), off on CUDA.
        enable_prefix_caching: share the KV cache of equal prompt prefixes across requests.
        sleep_mode: release the engine's memory through each update (vLLM's sleep mode,
            level 2); None: on CUDA, off on the CPU (where vLLM has none).
        exact: a seed on every request (exact resume of the sampled tokens; vLLM's sampler is
            then per request); None: on the CPU, off on CUDA.
        seed: the engine's global seed (draws of requests that carry no seed of their own);
            rank r's engine takes ``seed + r``.
    """

    dtype: str = knob("auto", choices=("auto", *DTYPES))
    # at most the model's positions (``seeded_vllm.SeededVLLM.check``)
    max_model_len: int | None = knob(None, low=1, integer=True, optional=True)
    kv_cache_space_gib: int = knob(1, low=1, high=4096, integer=True)
    gpu_memory_utilization: float = knob(0.3, low=0, high=1, low_open=True)
    max_num_batched_tokens: int | None = knob(None, low=1, integer=True, optional=True)
    enforce_eager: bool | None = None
    enable_prefix_caching: bool = True
    sleep_mode: bool | None = None
    exact: bool | None = None
    seed: int = knob(0, low=0, high=MAX_ENGINE_SEED, high_open=True, integer=True)


@dataclass(frozen=True)
class VLLMSettings:
    """``VLLMEngineConfig`` resolved for one device (``resolve``): every value concrete.
    ``cuda``: the engine runs on a GPU (vLLM's CUDA build beside the trainer)."""

    dtype: str
    max_model_len: int | None
    kv_cache_space_gib: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int | None
    enforce_eager: bool
    enable_prefix_caching: bool
    sleep_mode: bool
    exact: bool
    seed: int
    cuda: bool


def resolve(config: VLLMEngineConfig, cuda: bool, precision: str = "fp32") -> VLLMSettings:
    """``config`` on a GPU (``cuda``) or the CPU, for a trainer in ``precision``."""
    values: dict[str, Any] = {f.name: getattr(config, f.name) for f in fields(config)}
    if values["dtype"] == "auto":
        values["dtype"] = PRECISION_DTYPE_NAMES.get(precision, "float32")
    if values["max_num_batched_tokens"] is None and cuda:
        values["max_num_batched_tokens"] = CUDA_BATCHED_TOKENS
    for key, on_cuda, on_cpu in (
        ("enforce_eager", False, True),
        ("sleep_mode", True, False),
        ("exact", False, True),
    ):
        if values[key] is None:
            values[key] = on_cuda if cuda else on_cpu
    return VLLMSettings(**values, cuda=cuda)


def llm_kwargs(
    settings: VLLMSettings, model: str, max_positions: int, ranks: int = 1, rank: int = 0
) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` for an engine on the model directory ``model``;
    ``ranks`` > 1: one engine per torchrun rank on the trainer's process group
    (``external_launcher``, TRL's colocate mode), this one rank ``rank``'s."""
    kwargs: dict[str, Any] = {
        "model": model,
        # requests are token ids and responses stay ids (detokenize=False): no tokenizer
        # needed, and the character tokenizer's HF form need not satisfy vLLM
        "skip_tokenizer_init": True,
        "dtype": settings.dtype,
        "max_model_len": settings.max_model_len or max_positions,
        "enforce_eager": settings.enforce_eager,
        "enable_prefix_caching": settings.enable_prefix_caching,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        # each rank's engine its own stream (TRL seeds each with its process index): requests
        # that carry no seed (engine.exact off, CUDA's default) draw independently on each rank
        "seed": settings.seed + rank,
        # the sampled token's logprob after temperature scaling (vLLM's default is the raw
        # logits' log_softmax): the distribution the trainer re-scores (scoring.py), so the
        # importance ratio starts at 1 (TRL issue #4159). vLLM also renormalises over the
        # top-k / top-p set, which astrai's sampler does not: with those on, the two differ
        # by log(kept mass), and the trainer's recomputation (decoupled) is the one to trust
        "logprobs_mode": "processed_logprobs",
    }
    if settings.max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = settings.max_num_batched_tokens
    if settings.sleep_mode:
        kwargs["enable_sleep_mode"] = True
    if ranks > 1:
        kwargs["distributed_executor_backend"] = "external_launcher"
        kwargs["tensor_parallel_size"] = 1
    return kwargs
