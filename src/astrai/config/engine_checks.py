"""Checks of the ``engine`` node (``astrai.rollout.engine``): a known engine and, for
``engine=vllm``, its options and what the engine needs of the run, before anything starts."""

from __future__ import annotations

import importlib.util

from omegaconf import DictConfig

from astrai.algorithms.correction import CORRECTIONS, OLD_LOGPROBS
from astrai.config.errors import ConfigError, require
from astrai.config.ranges import MAX_SEED, check_number
from astrai.models.llama import LlamaConfig
from astrai.rollout.engine import ENGINES, VLLM_INSTALL
from astrai.tasks.base import ProblemSource

VLLM_DTYPES = ("float32", "bfloat16", "float16")
# ``engine.correction_high``'s ceiling: published bands stop at 5 (TIS and TRL's cap 2, IcePop
# 5); a weight of 1e4 already lets one token outweigh ten thousand others, and a larger float
# overflows the float32 weights (1e300: an overflow traceback mid-step)
MAX_CORRECTION_HIGH = 10_000.0


def validate_engine(
    cfg: DictConfig, model: LlamaConfig, task: ProblemSource, device: str | None
) -> None:
    """``engine``: a known engine and its π_old and correction (``validate_correction``); for
    ``vllm`` its options, the CPU (``device``: the planned device, None where a container
    decides), replicas under torchrun (not FSDP shards), and vLLM installed (checked last: a
    bad option is named even where vLLM is missing). Nothing starts here."""
    engine = cfg.engine
    require(
        engine.name in ENGINES,
        f"engine.name={engine.name!r} is not an engine (choose from {', '.join(ENGINES)}; "
        "select one with engine=<name>)",
    )
    validate_correction(engine)
    if engine.name != "vllm":
        return
    require(
        engine.dtype in VLLM_DTYPES,
        f"engine.dtype={engine.dtype!r} is not one of {', '.join(VLLM_DTYPES)}",
    )
    check_number(engine.kv_cache_space_gib, "engine.kv_cache_space_gib", 1, 4096, integer=True)
    check_number(
        engine.gpu_memory_utilization, "engine.gpu_memory_utilization", 0, 1, low_open=True
    )
    check_number(engine.seed, "engine.seed", 0, MAX_SEED, high_open=True, integer=True)
    for key in ("enforce_eager", "enable_prefix_caching"):
        require(isinstance(engine[key], bool), f"engine.{key} must be true or false")
    positions = model.max_position_embeddings
    check_number(
        engine.max_model_len, "engine.max_model_len", 1, positions, integer=True, optional=True
    )
    max_new_tokens = int(cfg.train_type.sampling.max_new_tokens)
    # the longest request: an embedded task's longest prompt (BOS included), or any prompt a
    # dataset may hold (every prompt fits max_position_embeddings - max_new_tokens)
    prompt = 1 + task.max_prompt_len() if hasattr(task, "max_prompt_len") else None
    needed = positions if prompt is None else prompt + max_new_tokens
    require(
        engine.max_model_len is None or engine.max_model_len >= needed,
        f"engine.max_model_len ({engine.max_model_len}) is below the longest prompt + "
        f"train_type.sampling.max_new_tokens ({needed})",
    )
    # colocated on a GPU, vLLM would take its default 90% of the memory the update needs:
    # refused until the engine's memory fraction and sleep mode are built
    require(
        device == "cpu",
        "engine=vllm runs on the CPU only for now (issue 34: on CUDA its memory fraction and "
        "sleep mode are not built yet); set infra.device=cpu, or use engine=torch",
    )
    world = (
        cfg.infra.nproc_per_node * cfg.infra.nnodes
        if isinstance(cfg.infra.nproc_per_node, int)
        else None
    )
    # one engine per rank takes each update's full weights from the rank's own replica; a
    # sharded policy would first have to gather them (not built)
    require(
        world in (None, 1) or cfg.infra.parallel != "fsdp",
        "engine=vllm takes its weights from each rank's full replica: infra.parallel=fsdp "
        f"shards them over the {world} processes (use infra.parallel=ddp, or engine=torch)",
    )
    require(
        importlib.util.find_spec("vllm") is not None,
        f"engine=vllm needs vLLM, which is not installed: {VLLM_INSTALL}",
    )
    from astrai.rollout.vllm_engine import check_head_dim

    try:  # imports vLLM (seconds): only for engine=vllm jobs
        check_head_dim(model.head_dim)
    except ValueError as err:
        raise ConfigError(
            f"engine=vllm: {err} (e.g. model.num_attention_heads=2 model.num_key_value_heads=1)"
        ) from err


def validate_correction(engine: DictConfig) -> None:
    """``engine.old_logprobs``, ``engine.correction`` and its band (``algorithms.correction``):
    a correction needs the trainer's own π_old, and its band is a floor in [0, 1) and a
    ceiling above 1 (so the weight 1 of no mismatch is always inside), set only where a
    correction reads it."""
    require(
        engine.old_logprobs in OLD_LOGPROBS,
        f"engine.old_logprobs={engine.old_logprobs!r} is not one of {', '.join(OLD_LOGPROBS)}",
    )
    require(
        engine.correction in CORRECTIONS,
        f"engine.correction={engine.correction!r} is not one of {', '.join(CORRECTIONS)}",
    )
    if engine.correction == "none":
        for key in ("correction_low", "correction_high"):
            require(
                engine[key] is None,
                f"engine.{key}={engine[key]} is set but engine.correction=none reads no band",
            )
        return
    require(
        engine.old_logprobs == "recompute",
        f"engine.correction={engine.correction} needs engine.old_logprobs=recompute (with "
        "bypass, π_old is the engine's own logprobs: there is no mismatch to correct)",
    )
    check_number(
        engine.correction_low, "engine.correction_low", 0, 1, high_open=True, optional=True
    )
    check_number(
        engine.correction_high,
        "engine.correction_high",
        1,
        MAX_CORRECTION_HIGH,
        low_open=True,
        optional=True,
    )
