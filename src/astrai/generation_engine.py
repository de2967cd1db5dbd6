"""Where ``python -m astrai.generate`` samples (``--device``, ``--engine``), and whether its
requests fit there.

``--engine torch`` (the default) is astrai's KV-cache sampler on the loaded policy;
``--engine vllm`` is vLLM's CPU build (``rollout.vllm_engine``) started from the loaded policy
and tokenizer. Both go through the trainer's ``Engine`` interface (``rollout.engine``), so a
prompt's group is sampled as the run's rollouts sample it. vLLM's knobs are those of the run
that wrote the checkpoint when it sampled with vLLM, else ``conf/engine/vllm.yaml``'s defaults;
``--seed`` seeds the engine and, through the sampling stream, each request. What can refuse a
request (the device, vLLM missing, a head size the engine lacks, a prompt + ``--max-new-tokens``
past the model's positions or the engine's ``max_model_len``) is one line, checked before the
engine starts; the engine is closed when sampling ends, also on an error.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from astrai.config.ranges import MAX_SEED
from astrai.rollout.engine import VLLM_INSTALL, VLLM_KNOBS, build_engine
from astrai.rollout.sampler import Generation, SamplingConfig

# --precision -> engine.dtype: a precision given on the command line wins over the engine's
ENGINE_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def device_error(name: str) -> str | None:
    """Why ``--device name`` cannot be used here, or None."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:
        return f"not a torch device ({str(err).splitlines()[0]})"
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            return "no CUDA device is visible (torch.cuda.device_count() is 0)"
        if device.index is not None and device.index >= count:
            return f"there are {count} visible CUDA devices"
    elif device.type != "cpu":
        return "use cpu or cuda[:N]"
    return None


def engine_error(name: str, device: str, seed: int) -> str | None:
    """Why ``--engine name`` cannot sample on ``--device device`` with ``--seed seed`` (one
    line), or None. Reads only the flags and the installed packages: run before the model
    loads."""
    if name != "vllm":
        return None
    # on a GPU vLLM would take its default 90% of the memory, and astrai has not built or
    # tested its CUDA path (memory fraction, sleep mode, pins: issue 34)
    if device.split(":")[0] != "cpu":
        return (
            f"--engine vllm runs on the CPU only for now (issue 34: vLLM on CUDA is not built "
            f"yet in astrai); use --device cpu, or --engine torch on {device}"
        )
    if not 0 <= seed < MAX_SEED:  # vLLM's own seed, as engine.seed is checked for a run
        return f"--engine vllm: --seed must be in [0, 2**62) (got {seed})"
    if importlib.util.find_spec("vllm") is None:
        return f"--engine vllm needs vLLM, which is not installed: {VLLM_INSTALL}"
    return None


def engine_config(
    name: str, run: DictConfig | None, seed: int, precision: str | None
) -> DictConfig | None:
    """The ``engine`` node ``--engine name`` builds (``rollout.engine.build_engine``).

    Args:
        name: ``torch`` or ``vllm``.
        run: the resolved config of the run that wrote the checkpoint (None: a model directory).
            Its engine's knobs are kept when it sampled with the same engine, so the checkpoint
            is sampled as its run sampled it.
        seed: ``--seed``: the engine's own seed.
        precision: ``--precision`` when given: the engine's dtype (``fp32`` -> float32).

    Returns:
        None for ``torch`` (astrai's sampler takes no knobs); else the node with every key of
        ``VLLM_KNOBS``, the defaults composed from ``conf/engine/<name>.yaml``.
    """
    if name == "torch":
        return None
    from astrai.config.compose import compose_train_config

    composed = compose_train_config([f"engine={name}"], validate=False).engine
    node = OmegaConf.create(OmegaConf.to_container(composed, resolve=True))
    ran = OmegaConf.select(run, "engine") if run is not None else None
    if isinstance(ran, DictConfig) and ran.get("name") == name:
        # only the knobs the engine takes: a key an older run wrote and vLLMEngineConfig no
        # longer has would fail build_engine
        for key in VLLM_KNOBS:
            if key in ran:
                node[key] = ran[key]
    node.seed = seed
    if precision is not None:
        node.dtype = ENGINE_DTYPES[precision]
    return node


def check_length(policy: torch.nn.Module, prompt_width: int, max_new_tokens: int) -> None:
    """ValueError unless the prompts and ``max_new_tokens`` fit the model's positions."""
    limit = getattr(getattr(policy, "config", None), "max_position_embeddings", None)
    if isinstance(limit, int) and prompt_width >= limit:  # no --max-new-tokens helps
        raise ValueError(
            f"the longest prompt has {prompt_width} tokens, which leaves no position for a "
            f"response within the model's max_position_embeddings ({limit}); shorten it"
        )
    if isinstance(limit, int) and prompt_width + max_new_tokens > limit:
        raise ValueError(
            f"--max-new-tokens {max_new_tokens}: with the longest prompt ({prompt_width} "
            f"tokens) that passes the model's max_position_embeddings ({limit}); use at most "
            f"{max(limit - prompt_width, 0)}"
        )


def check_engine(
    engine_cfg: DictConfig | None, policy: Any, prompt_width: int, max_new_tokens: int
) -> None:
    """ValueError (one line) when the engine cannot serve ``policy`` or these lengths: a
    ``max_model_len`` below the longest prompt + ``max_new_tokens`` (``prompt_width``: tokens,
    BOS included), or a head size vLLM's CPU kernel lacks. Imports vLLM for ``vllm`` (seconds);
    starts nothing."""
    if engine_cfg is None:
        return
    limit = engine_cfg.max_model_len
    if limit is not None and prompt_width + max_new_tokens > limit:
        raise ValueError(
            f"--engine vllm: the longest prompt ({prompt_width} tokens) + --max-new-tokens "
            f"{max_new_tokens} pass the engine's max_model_len ({limit}, the run's "
            f"engine.max_model_len); use at most {max(limit - prompt_width, 0)} new tokens"
        )
    # generate's stdout is its answers: vLLM's log lines (stdout by default) go to stderr. Read
    # when vLLM is first imported, which is here
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    from astrai.rollout.vllm_engine import check_head_dim

    try:
        check_head_dim(policy.config.head_dim)
    except ValueError as err:
        # a checkpoint's heads are fixed: the way out here is the other engine, not an override
        raise ValueError(f"--engine vllm: {err}; sample this model with --engine torch") from err


def sample_groups(
    engine_cfg: DictConfig | None,
    policy: Any,
    tokenizer: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    group_size: int,
    sampling: SamplingConfig,
    seed: int,
    precision: str,
) -> Generation:
    """``group_size`` responses to each prompt from the engine ``engine_cfg`` names, started
    for this call and closed after it (also on an error).

    Args:
        engine_cfg: ``engine_config``'s node (None: astrai's sampler).
        prompt_ids: ``[B, P]`` left-padded prompt tokens, on the policy's device.
        prompt_mask: ``[B, P]`` bool, True on real prompt tokens.
        seed: seeds the sampling stream: astrai's sampler draws its tokens from it, vLLM one
            seed per request, so either engine repeats itself for the same ``seed``.
        precision: ``fp32`` or ``bf16`` for astrai's sampler (vLLM computes in its ``dtype``).

    Returns:
        A ``Generation`` of ``B * group_size`` rows, prompt-major (prompt b's rows are
        ``b * G .. b * G + G - 1``): ``response_ids``, ``response_mask``, ``logprobs``
        ``[B*G, R]``.
    """
    generator = torch.Generator(device=prompt_ids.device).manual_seed(seed)
    engine = build_engine(engine_cfg, policy, tokenizer)
    try:
        return engine.sample(
            policy,
            prompt_ids,
            prompt_mask,
            group_size,
            sampling,
            tokenizer.stop_ids,
            tokenizer.pad_id,
            generator,
            precision=precision,
        )
    finally:
        engine.close()  # vLLM's memory and its export directory
