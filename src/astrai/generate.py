"""``python -m astrai.generate SOURCE [--task [NAME] --n 8 | "a prompt" ...]``: print completions.

SOURCE is a training checkpoint (``step_<N>``), a run dir (its latest checkpoint) or a Hugging
Face model directory. A checkpoint is sampled with its run's settings (the resolved
``config.yaml`` it holds): ``train_type.sampling.max_new_tokens`` and greedy decoding, as the
run's evaluation does; flags given still win. A model directory defaults to 32 new tokens, greedy.

With ``--task`` the first ``--n`` held-out prompts of a task are answered and each completion's
reward is printed, then the mean reward and accuracy. ``--task`` alone (or ``--task run``) is the
run's own task, as its config built it (``task=dataset``: the files it named), scored by the run's
reward, as its ``eval/`` metrics are; ``--task NAME`` is ``conf/task/NAME.yaml`` (the run's own
config when the run trained that task). Without ``--task`` each prompt given is answered ``--n``
times. A checkpoint of a run with an environment (``env=...``, docs/environments.md) plays
each prompt as a task row's text (``--task``: each held-out row of the run's task) through one
episode of that environment and prints its turns (``a:`` sampled, ``env:`` the environment's
replies), reward and ending; ``--task`` then the mean reward and the share solved;
``--show-tokens`` then each episode as the model saw it (``rollout.episodes.view``).
``--temperature 0`` is greedy. ``--engine torch`` (the default) samples with astrai's KV-cache
sampler, ``--engine vllm`` with vLLM's CPU build started from the loaded policy (its knobs: the
run's ``engine`` node when the run used vLLM, else ``conf/engine/vllm.yaml``; generation_engine).
Exit status 0, or 2 with one line on stderr for a bad source or option.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from omegaconf import DictConfig, OmegaConf

from astrai.checkpoints.layout import CheckpointError
from astrai.checkpoints.policy import LoadedPolicy, load_policy
from astrai.cli_errors import ArgumentParser, one_line_errors
from astrai.config.checkpoint_run import (
    read_run_config,
    run_collector,
    run_env,
    run_precision,
    run_sampling_default,
    run_task_config,
)
from astrai.generation_engine import (
    ENGINE_NAMES,
    check_engine,
    check_length,
    check_prompts,
    decoding_numbers,
    device_error,
    engine_config,
    engine_error,
    episode_report,
    play_transcripts,
    prompt_error,
    sample_groups,
)
from astrai.models.hf_tokenizer import TokenizerFileError
from astrai.models.precision import PRECISIONS
from astrai.models.pretrained import ModelDirError
from astrai.models.tokenizer import Tokenizer
from astrai.rewards.base import Reward, RewardConfigError, RewardError
from astrai.rewards.build import build_reward
from astrai.rewards.config import reward_node
from astrai.rollout.collect import decode_responses, left_pad, prompt_context
from astrai.rollout.collectors import Collector, SingleTurnCollector
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.episodes.env_spec import EnvSpec
from astrai.tasks.base import Problem, ProblemSource, Task

RUN_TASK = "run"  # `--task` without a name, or `--task run`: the run's own task
DEFAULT_MAX_NEW_TOKENS = 32  # a model directory records no response length
DEFAULT_TASK_PROMPTS = 8
SHOW_TOKENS_HELP = "with an environment: print each episode's tokens as the model saw them"
MAX_N = 4096  # task prompts / samples per prompt: more is a benchmark, not a look at a model


@dataclass
class Scoring:
    """The prompts of ``--task`` and how their completions are scored."""

    problems: list[Problem]
    label: str  # which task, for the header line
    task: Task | None = None  # an embedded task scored by its own reward and exact match
    reward: Reward | None = None  # or the run's reward, as its evaluation scores


def task_names(embedded_only: bool = True) -> list[str]:
    """The options of ``conf/task/``; ``embedded_only`` leaves out ``dataset``, whose files only
    a run's config names."""
    from astrai.paths import CONFIG_DIR

    names = sorted(p.stem for p in (Path(CONFIG_DIR) / "task").glob("*.yaml"))
    return [name for name in names if not (embedded_only and name == "dataset")]


def compose_task_config(name: str, embedded_only: bool = True) -> DictConfig:
    """``conf/task/<name>.yaml`` with its default settings."""
    from hydra.errors import HydraException

    from astrai.config.compose import compose_train_config

    if name not in task_names(embedded_only):
        raise ValueError(
            f"--task takes an embedded task ({', '.join(task_names())}), not {name!r}; "
            f"--task alone answers a checkpoint's own task"
        )
    try:
        cfg = compose_train_config([f"task={name}"], validate=False)
    except HydraException as err:
        raise ValueError(f"--task {name!r}: {err}") from err
    return cfg.task


def compose_task(name: str) -> Task:
    """The task ``conf/task/<name>.yaml`` describes, with its default settings."""
    from hydra.utils import instantiate

    return instantiate(compose_task_config(name))


def task_scoring(
    name: str,
    run: DictConfig | None,
    loaded: LoadedPolicy,
    n: int,
    collector: type[Collector] = SingleTurnCollector,
) -> Scoring:
    """What ``--task name`` answers: the run's task (scored by its reward) or an embedded one.
    The run's task is built as its trainer built it (``build_task``: a dataset's over-long rows
    dropped under ``task.filter_overlong_prompts``), so its eval prompts are the run's. A run
    whose ``collector`` plays episodes answers its own task only: its environment opens the
    rows."""
    from hydra.utils import instantiate

    from astrai.config.run_task import build_task, max_prompt_tokens

    checkpoint = loaded.source

    if name == RUN_TASK and run is None:
        raise ValueError(
            f"--task without a name answers a training checkpoint's own task; {checkpoint} is a "
            f"model directory: name a task ({', '.join(task_names())})"
        )
    if name != RUN_TASK:
        task_cfg = compose_task_config(name, embedded_only=run is None)
        if run is None or OmegaConf.select(run, "task._target_") != task_cfg.get("_target_"):
            if name not in task_names():
                raise ValueError(f"--task {name}: the run did not train on a {name} task")
            if collector.episodes:
                target = OmegaConf.select(run, "env._target_")
                raise ValueError(
                    f"--task {name}: a run of env={target} plays its own task's episodes "
                    "only (--task)"
                )
            task: Task = instantiate(task_cfg)
            return Scoring(task.eval_problems(n), f"{name} (conf/task/{name}.yaml)", task=task)
    assert run is not None
    positions = loaded.policy.config.max_position_embeddings
    source: ProblemSource = build_task(
        run_task_config(run, checkpoint), loaded.tokenizer, max_prompt_tokens(run, positions)
    )
    reward = build_reward(reward_node(run.reward))
    return Scoring(source.eval_problems(n), f"{source.name} (the run's)", reward=reward)


def score(
    scoring: Scoring, completions: list[str], tokenizer: Tokenizer | None = None
) -> tuple[list[float], list[bool]]:
    """Each completion's reward and whether it counts as correct (``tokenizer``: the
    policy's, for a reward that takes the rendered prompts)."""
    texts = [p.text for p in scoring.problems]
    if scoring.reward is not None:
        answers = [p.answer for p in scoring.problems]
        context = prompt_context(scoring.reward, scoring.problems, tokenizer)
        rewards, _ = scoring.reward.score(texts, completions, answers, **context)
        return rewards, scoring.reward.correct(rewards)
    assert scoring.task is not None
    pairs = list(zip(texts, completions, strict=True))
    return [scoring.task.reward(*p) for p in pairs], [scoring.task.is_correct(*p) for p in pairs]


def _count(text: str) -> int:
    """An ``--n``: an integer, also written as a float (``1e3``)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(value)


def option_error(args: argparse.Namespace) -> str | None:
    """Why the sampling options cannot be used (one line), or None."""
    if args.n is not None and not 1 <= args.n <= MAX_N:
        return f"--n must be in [1, {MAX_N}] (got {args.n})"
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        return f"--max-new-tokens must be >= 1 (got {args.max_new_tokens})"
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        return f"--temperature must be a finite number >= 0 (got {args.temperature})"
    if args.top_k < 0:
        return f"--top-k must be >= 0, 0 = off (got {args.top_k})"
    if not 0 < args.top_p <= 1:  # NaN fails too
        return f"--top-p must be in (0, 1], 1 = off (got {args.top_p})"
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(prog="python -m astrai.generate", description=__doc__)
    parser.add_argument("source", type=Path, help="checkpoint, run dir or Hugging Face model dir")
    parser.add_argument("prompts", nargs="*", help="prompts to answer (without --task)")
    parser.add_argument(
        "--task",
        nargs="?",
        const=RUN_TASK,
        metavar="NAME",
        help="answer held-out prompts and score them: the run's own task (no NAME, or 'run') "
        "or conf/task/NAME.yaml",
    )
    parser.add_argument(
        "--n", type=_count, default=None, help=f"task prompts (8) / samples (1), at most {MAX_N}"
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"default: the run's train_type.sampling.max_new_tokens ({DEFAULT_MAX_NEW_TOKENS} "
        "for a model directory)",
    )
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="0 = greedy (the default, as eval)"
    )
    parser.add_argument("--top-k", type=int, default=0, help="0 = off")
    parser.add_argument("--top-p", type=float, default=1.0, help="in (0, 1]; 1 = off")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument(
        "--engine",
        choices=ENGINE_NAMES,
        default="torch",
        help="what samples: astrai's KV-cache sampler (torch) or vLLM's CPU build (vllm)",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="decode in fp32 or bf16 (default: the run's infra.precision, as its rollouts and "
        "evaluations decoded; fp32 for a model directory)",
    )
    parser.add_argument(
        "--no-chat-template", action="store_true", help="feed prompts without the chat template"
    )
    parser.add_argument("--show-tokens", action="store_true", help=SHOW_TOKENS_HELP)
    args = parser.parse_args(argv)
    if (args.task is None) == (not args.prompts):
        parser.error("give either --task [NAME] or one or more prompts")
    error = option_error(args)
    if error is not None:
        parser.error(error)
    return args


@one_line_errors("astrai.generate")
def main(argv: list[str] | None = None) -> int:
    """Exit status 0; a bad source, option, prompt or device: one line, 2."""
    args = parse_args(argv)
    refusal = engine_error(args.engine, args.device, args.seed)  # before the model loads
    if refusal is not None:
        print(f"astrai.generate: {refusal}", file=sys.stderr)
        return 2
    refusal = device_error(args.device)
    if refusal is not None:
        print(f"astrai.generate: --device {args.device}: {refusal}", file=sys.stderr)
        return 2
    try:
        if args.task not in (None, RUN_TASK, *task_names(embedded_only=False)):
            compose_task_config(args.task)  # an unknown name fails before the model loads
        loaded = load_policy(args.source, chat_template=False if args.no_chat_template else None)
        run = read_run_config(loaded, args.source)
        precision = args.precision or run_precision(run)
        engine_cfg = engine_config(args.engine, run, args.seed, args.precision)
        scoring, env = None, run_env(run)
        collector = run_collector(run, env)
        if args.task is not None:
            n = args.n or DEFAULT_TASK_PROMPTS
            scoring = task_scoring(args.task, run, loaded, n, collector)
    except (
        CheckpointError,
        ModelDirError,
        TokenizerFileError,
        RewardConfigError,
        ValueError,
        OSError,
    ) as err:
        print(f"astrai.generate: {err}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    policy, tokenizer = loaded.policy.to(device), loaded.tokenizer
    if scoring is not None:
        if scoring.reward is not None:
            scoring.reward.to(device)  # a reward model scores on the device, as in training
        prompts, samples = [p.prompt for p in scoring.problems], 1
    else:
        prompts, samples = list(args.prompts), args.n or 1
    rows = [p for p in prompts for _ in range(samples)]  # prompt-major, as the engine's rows
    max_new_tokens = args.max_new_tokens or run_sampling_default(
        run, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS
    )
    sampling = SamplingConfig(max_new_tokens, args.temperature, args.top_k, args.top_p)
    try:  # a character the tokenizer does not know, a template that renders nothing
        if scoring is None:
            check_prompts(tokenizer, list(args.prompts))
        ids, mask = left_pad(tokenizer, prompts, device)
    except ValueError as err:
        print(f"astrai.generate: {prompt_error(tokenizer, err)}", file=sys.stderr)
        return 2
    check_length(policy, ids.shape[1], max_new_tokens)
    check_engine(engine_cfg, policy, ids.shape[1], max_new_tokens, args.device)
    if collector.episodes:  # the run trained episodes: each prompt (or held-out row) is one
        env = cast(EnvSpec, env)  # what the run's environment node holds (run_env)
        problems = [Problem(prompt=p, answer=None, text=p) for p in rows]
        threshold, task_part = 1.0, ""
        if scoring is not None:  # the run's own task, scored by its reward (task_scoring)
            assert scoring.reward is not None
            problems, threshold = scoring.problems, scoring.reward.accuracy_threshold
            task_part = f"task {scoring.label}, "
        print(f"# {loaded.source}\n# env {env.target}, {task_part}", end="")
        print(f"max_new_tokens {max_new_tokens} a turn")
        played = play_transcripts(
            engine_cfg, policy, tokenizer, env, problems, sampling, args.seed, precision, threshold
        )
        print("\n".join(episode_report(problems, played, scoring is not None, args.show_tokens)))
        return 0
    out = sample_groups(
        engine_cfg, policy, tokenizer, ids, mask, samples, sampling, args.seed, precision
    )
    completions = decode_responses(tokenizer, out.response_ids, out.response_mask)
    print(f"# {loaded.source}")
    decoding = "greedy" if args.temperature == 0 else f"temperature {args.temperature}"
    task_part = f"task {scoring.label}, " if scoring is not None else ""
    numbers = decoding_numbers(engine_cfg, precision)
    print(f"# {task_part}max_new_tokens {max_new_tokens}, {decoding}, {numbers}")
    return print_completions(scoring, rows, completions, tokenizer)


def print_completions(
    scoring: Scoring | None, rows: list[Any], completions: list[str], tokenizer: Tokenizer
) -> int:
    """Each prompt's completion (``--task``: scored, then the mean reward and accuracy);
    the exit status."""
    if scoring is None:
        for prompt, completion in zip(rows, completions, strict=True):
            print(f"{prompt!r} -> {completion!r}")
        return 0
    try:
        rewards, correct = score(scoring, completions, tokenizer)
    except (RewardError, ValueError) as err:
        print(f"astrai.generate: {err}", file=sys.stderr)
        return 2
    for problem, completion, reward in zip(scoring.problems, completions, rewards, strict=True):
        print(f"{problem.text!r} -> {completion!r}  reward {reward:.3f}")
    accuracy = sum(correct) / len(correct)
    print(f"# mean reward {sum(rewards) / len(rewards):.3f}, accuracy {accuracy:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
