"""Where ``python -m astrai.generate`` samples (``--device``, ``--engine``), and whether its
requests fit there.

``--engine NAME`` is the engine ``conf/engine/NAME.yaml`` names (``_target_``): ``torch`` (the
default) is astrai's KV-cache sampler on the loaded policy, ``vllm`` vLLM's CPU build started
from the loaded policy and tokenizer. Both go through the trainer's ``Engine`` interface
(``rollout.engines.engine``), so a prompt's group is sampled as the run's rollouts sample it. An
engine's knobs are those of the run that wrote the checkpoint when it sampled with the same
engine, else the YAML's defaults; ``--seed`` seeds the engine (where it has a ``seed`` knob)
and, through the sampling stream, each request. What can refuse a request is the engine's own
``check`` (the one config validation calls: the device, vLLM missing, a head size the engine
lacks, a prompt + ``--max-new-tokens`` past the engine's ``max_model_len``), run before the
model loads and again with it, before the engine starts; the engine is closed when sampling
ends, also on an error. A checkpoint of a run with an environment (``env=...``) plays each
prompt as an episode through the run's episode runner (``play_transcripts``). A prompt with a
character the tokenizer cannot encode is refused by name (``check_prompts``).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from astrai.config.ranges import MAX_SEED
from astrai.models.precision import PRECISION_DTYPE_NAMES
from astrai.paths import CONFIG_DIR
from astrai.rollout.engines.engine import Engine, EngineJob, build_engine, engine_class
from astrai.rollout.engines.sampler import Generation, SamplingConfig
from astrai.rollout.episodes.env_spec import EnvSpec
from astrai.rollout.episodes.rollout import episode_reward, episode_solved, play_episodes
from astrai.rollout.episodes.runner import Episode
from astrai.rollout.episodes.view import episode_view
from astrai.tasks.base import Problem

# the engines --engine offers: the options of conf/engine
ENGINE_NAMES = tuple(sorted(path.stem for path in (Path(CONFIG_DIR) / "engine").glob("*.yaml")))


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
    line), or None. Reads only the flags, the engine's YAML and the installed packages: run
    before the model loads."""
    node = default_node(name)
    cls = engine_class(node)
    if "seed" in _knobs(cls) and not 0 <= seed < MAX_SEED:  # as engine.seed is for a run
        return f"--engine {name}: --seed must be in [0, 2**62) (got {seed})"
    try:
        cls.check(node, EngineJob(device=device, command_line=True))
    except ValueError as err:
        return str(err)
    return None


@functools.cache
def _composed(name: str) -> dict[str, Any]:
    from astrai.config.compose import compose_train_config

    composed = compose_train_config([f"engine={name}"], validate=False).engine
    return OmegaConf.to_container(composed, resolve=True)  # type: ignore[return-value]


def default_node(name: str) -> DictConfig:
    """The ``engine`` node of ``conf/engine/<name>.yaml`` (a fresh copy: callers edit it)."""
    return OmegaConf.create(_composed(name))


def _knobs(cls: type[Engine]) -> set[str]:
    return {f.name for f in fields(cls.Config)}


def engine_config(
    name: str, run: DictConfig | None, seed: int, precision: str | None
) -> DictConfig:
    """The ``engine`` node ``--engine name`` builds (``rollout.engines.engine.build_engine``).

    Args:
        name: an option of ``conf/engine`` (``torch``, ``vllm``).
        run: the resolved config of the run that wrote the checkpoint (None: a model directory).
            Its engine's knobs are kept when it sampled with the same engine, so the checkpoint
            is sampled as its run sampled it.
        seed: ``--seed``: the engine's own seed, where it has one.
        precision: ``--precision`` when given: the engine's dtype (``fp32`` -> float32), where
            it has one.

    Returns:
        The node: ``_target_`` and every knob of the engine's ``Config``, the defaults composed
        from ``conf/engine/<name>.yaml``.
    """
    node = default_node(name)
    cls = engine_class(node)
    knobs = _knobs(cls)
    ran = OmegaConf.select(run, "engine") if run is not None else None
    # a run written before engines were named by _target_ names its engine by name
    if isinstance(ran, DictConfig) and (
        ran.get("_target_") == node._target_ or ran.get("name") == cls.name
    ):
        # only the knobs the engine takes: a key an older run wrote and the engine's Config no
        # longer has would fail build_engine
        for key in knobs & set(ran):
            node[key] = ran[key]
    if "seed" in knobs:
        node.seed = seed
    if precision is not None and "dtype" in knobs:
        # --precision -> engine.dtype: a precision given on the command line wins over the engine's
        node.dtype = PRECISION_DTYPE_NAMES[precision]
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
    engine_cfg: DictConfig,
    policy: Any,
    prompt_width: int,
    max_new_tokens: int,
    device: str = "cpu",
) -> None:
    """ValueError (one line) when the engine cannot serve ``policy`` or these lengths
    (``prompt_width``: the longest prompt in tokens, BOS included): the engine's own ``check``,
    with the model known. Imports vLLM for ``vllm`` (seconds); starts nothing."""
    # generate's stdout is its answers: vLLM's log lines (stdout by default) go to stderr. Read
    # when vLLM is first imported, which may be here
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    job = EngineJob(
        device=device,
        model=getattr(policy, "config", None),
        longest_prompt=prompt_width,
        max_new_tokens=max_new_tokens,
        command_line=True,
    )
    engine_class(engine_cfg).check(engine_cfg, job)


def decoding_numbers(engine_cfg: DictConfig, precision: str) -> str:
    """The number format the completions were decoded in, for the header line."""
    # an engine with its own weights computes in its engine.dtype, not in astrai's precision
    engine = engine_class(engine_cfg)
    if engine.samples_live_policy:
        return precision
    dtype = engine_cfg.get("dtype", precision)
    # "auto", engine=vllm's default: the trainer's precision (rollout.engines.vllm_settings)
    if dtype == "auto":
        dtype = PRECISION_DTYPE_NAMES.get(precision, precision)
    return f"{engine.name} {dtype}"


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
        precision: ``infra.precision``'s ``fp32`` or ``bf16``: astrai's sampler computes in it
            (vLLM in its ``dtype``, and says so where the two differ).

    Returns:
        A ``Generation`` of ``B * group_size`` rows, prompt-major (prompt b's rows are
        ``b * G .. b * G + G - 1``): ``response_ids``, ``response_mask``, ``logprobs``
        ``[B*G, R]``.
    """
    generator = torch.Generator(device=prompt_ids.device).manual_seed(seed)
    engine = build_engine(engine_cfg, policy, tokenizer, precision)
    try:
        return engine.sample(
            prompt_ids, prompt_mask, group_size, sampling, tokenizer.stop_ids, generator
        )
    finally:
        engine.close()  # vLLM's memory and its export directory


@dataclass(frozen=True)
class Transcript:
    """One played episode as ``astrai.generate`` prints it: ``line`` (its turns, reward and
    ending), its ``reward`` and whether it was ``solved`` (as the run's evaluation counts it),
    and its ``view``: its tokens as the model saw them (``rollout.episodes.view``)."""

    line: str
    reward: float
    solved: bool
    view: str = ""


def play_transcripts(
    engine_cfg: DictConfig | None,
    policy: Any,
    tokenizer: Any,
    spec: EnvSpec,
    problems: list[Problem],
    sampling: SamplingConfig,
    seed: int,
    precision: str,
    threshold: float = 1.0,
) -> list[Transcript]:
    """One episode of ``spec``'s environment on each problem (its task row), through the same
    runner as the run's rollouts and evaluations. ``threshold``: the reward that counts as
    solved where the environment reports no ``solved`` (the run's ``accuracy_threshold``)."""
    device = policy.lm_head.weight.device
    generator = torch.Generator(device=device).manual_seed(seed)
    engine = build_engine(engine_cfg, policy, tokenizer, precision)
    try:
        episodes = play_episodes(
            engine,
            tokenizer,
            spec,
            problems,
            1,
            sampling,
            policy.config.max_position_embeddings,
            generator,
            0,
            device,
        )
    finally:
        engine.close()
    return [
        Transcript(
            _transcript(tokenizer, e),
            episode_reward(e),
            episode_solved(e, threshold),
            episode_view(tokenizer, e.tokens),
        )
        for e in episodes
    ]


def episode_report(
    problems: list[Problem], played: list[Transcript], scored: bool, views: bool = False
) -> list[str]:
    """What ``astrai.generate`` prints of played episodes: each problem's line, with
    ``views`` (``--show-tokens``) followed by the episode as the model saw it (its tokens,
    the sampled ones in ``[[ ]]``) and a blank line; ``scored`` (``--task``): then the mean
    reward and the share solved, as the run's ``eval/reward_mean`` and ``eval/accuracy``
    count them."""
    lines = []
    for problem, episode in zip(problems, played, strict=True):
        lines.append(f"{problem.text!r} -> {episode.line}")
        if views:
            lines += [episode.view, ""]
    if scored:
        reward = sum(e.reward for e in played) / len(played)
        accuracy = sum(e.solved for e in played) / len(played)
        lines.append(f"# mean reward {reward:.3f}, accuracy {accuracy:.3f}")
    return lines


def _transcript(tokenizer: Any, episode: Episode) -> str:
    """``a: 'c' | env: '=4042' | a: '4042'  reward 1.500, solved`` (or how it ended)."""
    tokens, parts, run = episode.tokens, [], []
    kinds = [(t > 0, sampled) for t, sampled in zip(tokens.turns, tokens.trainable, strict=True)]
    for index, kind in enumerate(kinds):
        if not kind[0]:
            continue  # the opening: the prompt itself
        run.append(tokens.ids[index])
        if index + 1 == len(kinds) or kinds[index + 1] != kind:
            parts.append(f"{'a' if kind[1] else 'env'}: {tokenizer.decode(run)!r}")
            run = []
    solved = episode.metrics.get("solved")
    ending = (
        "failed: " + str(episode.error)
        if episode.failed
        else ("solved" if solved else "truncated" if episode.truncated else "done")
    )
    return f"{' | '.join(parts)}  reward {episode_reward(episode):.3f}, {ending}"


def unknown_characters(tokenizer: Any, text: str) -> list[str]:
    """The characters of ``text`` that ``tokenizer`` cannot encode: encoding one alone raises
    (the character tokenizer) or does not decode back to it (a vocabulary's unknown token)."""
    unknown = []
    for char in dict.fromkeys(text):
        if not char.strip():
            continue  # decoding may strip whitespace
        try:
            known = char in tokenizer.decode(tokenizer.encode(char, False))
        except ValueError:
            known = False
        if not known:
            unknown.append(char)
    return unknown


def check_prompts(tokenizer: Any, prompts: list[str]) -> None:
    """ValueError naming the first prompt character the tokenizer does not know."""
    for prompt in prompts:
        unknown = unknown_characters(tokenizer, prompt)
        if unknown:
            chars = ", ".join(repr(c) for c in unknown)
            raise ValueError(
                f"prompt {prompt!r}: the tokenizer does not know the character(s) {chars}"
            )


def prompt_error(tokenizer: Any, err: ValueError) -> str:
    """A prompt that does not encode, as one line naming the chat template's file where the
    template is the cause."""
    template = getattr(tokenizer, "template_file", None)
    if template is not None and "chat template" in str(err):
        return f"{template}: {err} (--no-chat-template feeds the prompts without it)"
    return str(err)
