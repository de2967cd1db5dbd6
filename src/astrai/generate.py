"""``python -m astrai.generate SOURCE [--task NAME --n 8 | "a prompt" ...]``: print completions.

SOURCE is a training checkpoint (``step_<N>``), a run dir (its latest checkpoint) or a Hugging
Face model directory. With ``--task`` the first ``--n`` held-out prompts of that task (its
default config, ``conf/task/NAME.yaml``) are answered and each completion's reward is printed,
then the mean reward and accuracy; otherwise each prompt given is answered ``--n`` times.
Sampling uses astrai's KV-cache sampler; ``--temperature 0`` (the default) is greedy.
Exit status 0, or 2 with one line on stderr for a bad source or option.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from astrai.checkpoints.layout import CheckpointError
from astrai.checkpoints.policy import load_policy
from astrai.models.hf_tokenizer import TokenizerFileError
from astrai.models.pretrained import ModelDirError
from astrai.rollout.collect import decode_responses, left_pad
from astrai.rollout.sampler import SamplingConfig, generate
from astrai.tasks.base import Task


def compose_task(name: str) -> Task:
    """The task ``conf/task/<name>.yaml`` describes, with its default settings."""
    from hydra.errors import HydraException
    from hydra.utils import instantiate

    from astrai.config.compose import compose_train_config
    from astrai.paths import CONFIG_DIR

    # the embedded tasks: task=dataset needs its files, which only a run's config names
    choices = sorted(p.stem for p in (Path(CONFIG_DIR) / "task").glob("*.yaml"))
    choices = [c for c in choices if c != "dataset"]
    if name not in choices:
        raise ValueError(f"--task takes an embedded task ({', '.join(choices)}), not {name!r}")
    try:
        cfg = compose_train_config([f"task={name}"], validate=False)
    except HydraException as err:
        raise ValueError(f"--task {name!r}: {err}") from err
    return instantiate(cfg.task)


def _device_error(name: str) -> str | None:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m astrai.generate", description=__doc__)
    parser.add_argument("source", type=Path, help="checkpoint, run dir or Hugging Face model dir")
    parser.add_argument("prompts", nargs="*", help="prompts to answer (without --task)")
    parser.add_argument("--task", help="answer this task's held-out prompts and score them")
    parser.add_argument("--n", type=int, default=None, help="task prompts (8) / samples (1)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument(
        "--no-chat-template", action="store_true", help="feed prompts without the chat template"
    )
    args = parser.parse_args(argv)
    if (args.task is None) == (not args.prompts):
        parser.error("give either --task NAME or one or more prompts")
    if args.n is not None and args.n < 1:
        parser.error("--n must be >= 1")
    if args.max_new_tokens < 1 or args.temperature < 0:
        parser.error("--max-new-tokens must be >= 1 and --temperature >= 0")
    device_error = _device_error(args.device)
    if device_error is not None:
        print(f"astrai.generate: --device {args.device}: {device_error}", file=sys.stderr)
        return 2
    try:
        task = compose_task(args.task) if args.task else None
        loaded = load_policy(args.source, chat_template=False if args.no_chat_template else None)
    except (CheckpointError, ModelDirError, TokenizerFileError, ValueError, OSError) as err:
        print(f"astrai.generate: {err}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    policy, tokenizer = loaded.policy.to(device), loaded.tokenizer
    if task is not None:
        prompts, samples = task.eval_prompts(args.n or 8), 1
    else:
        prompts, samples = list(args.prompts), args.n or 1
    rows = [p for p in prompts for _ in range(samples)]
    ids, mask = left_pad(tokenizer, rows, device)
    sampling = SamplingConfig(args.max_new_tokens, args.temperature, args.top_k, args.top_p)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    out = generate(policy, ids, mask, sampling, tokenizer.eos_id, tokenizer.pad_id, generator)
    completions = decode_responses(tokenizer, out.response_ids, out.response_mask)
    print(f"# {loaded.source}")
    rewards, correct = [], []
    for prompt, completion in zip(rows, completions, strict=True):
        line = f"{prompt!r} -> {completion!r}"
        if task is not None:
            rewards.append(task.reward(prompt, completion))
            correct.append(task.is_correct(prompt, completion))
            line += f"  reward {rewards[-1]:.3f}"
        print(line)
    if task is not None:
        accuracy = sum(correct) / len(correct)
        print(f"# mean reward {sum(rewards) / len(rewards):.3f}, accuracy {accuracy:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
