"""Prompts rendered and encoded as the run will, before the run: a chat template that refuses a
task's prompt, or a prompt that leaves the response no positions, is one error naming the
prompt, not a traceback at the step that draws it.

``DatasetTask.check_tokens`` checks every row of a user's files this way; an embedded task's
stream is endless, so ``first_prompts`` takes what the run renders first: the held-out prompts
of every evaluation (step 0 included) and the first step's training prompts. With
``task.filter_overlong_prompts`` a user's rows that are too long are dropped instead, and the
start says how many (``OverlongReport``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from astrai.chat import Prompt
from astrai.tasks.base import ProblemSource

LabelledPrompt = tuple[Prompt, str]  # a prompt and where it comes from, for the message


class PromptError(ValueError):
    """A prompt the run could not use; the message names it."""


class PromptRenderError(PromptError):
    """The tokenizer (its chat template) cannot render the prompt."""


class PromptLengthError(PromptError):
    """The prompt leaves the response fewer positions than ``max_new_tokens``."""


@dataclass(frozen=True)
class OverlongReport:
    """What ``task.filter_overlong_prompts`` dropped: prompts longer than ``max_prompt_tokens``
    (the model's ``max_position_embeddings`` less ``train_type.sampling.max_new_tokens``)."""

    dropped_train: int
    total_train: int
    dropped_eval: int
    total_eval: int
    max_prompt_tokens: int

    def line(self) -> str:
        """The one start-up line: ``task: dropped K of N prompts longer than L tokens ...``."""
        dropped = self.dropped_train + self.dropped_eval
        total = self.total_train + self.total_eval
        return (
            f"task: dropped {dropped} of {total} prompts longer than {self.max_prompt_tokens} "
            f"tokens ({self.dropped_train} of {self.total_train} training, {self.dropped_eval} "
            f"of {self.total_eval} eval; task.filter_overlong_prompts)"
        )


def count_prompt_tokens(
    prompt: Prompt, where: str, encode_prompt: Callable[[Prompt], list[int]]
) -> int:
    """The tokens of ``prompt`` as the run encodes it (``encode_prompt``: chat template
    included); ``PromptRenderError`` ``<where>: <why>`` when it does not render, or renders
    as no tokens (or, with a chat template, without the user's text: ``HFTokenizer``)."""
    try:
        tokens = len(encode_prompt(prompt))
    except ValueError as err:
        raise PromptRenderError(f"{where}: {err}") from err
    if tokens == 0:  # nothing for the policy to continue: sampling would index an empty row
        raise PromptRenderError(f"{where}: the prompt renders as no tokens")
    return tokens


def check_prompt_tokens(
    prompts: Iterable[LabelledPrompt],
    encode_prompt: Callable[[Prompt], list[int]],
    max_prompt_tokens: int,
) -> None:
    """Encode each prompt (``encode_prompt``: chat template included) and count its tokens.

    Raises:
        PromptRenderError: the prompt does not render; ``<where>: <why>``.
        PromptLengthError: it has more than ``max_prompt_tokens`` tokens.
    """
    for prompt, where in prompts:
        tokens = count_prompt_tokens(prompt, where, encode_prompt)
        if tokens > max_prompt_tokens:
            raise PromptLengthError(
                f"{where}: the prompt has {tokens} tokens; with "
                f"train_type.sampling.max_new_tokens the model's max_position_embeddings "
                f"allow {max_prompt_tokens}"
            )


def first_prompts(
    task: ProblemSource, seed: int, eval_prompts: int, prompts_per_step: int
) -> list[LabelledPrompt]:
    """The prompts a run of ``task`` renders first, each once: the eval prompts
    (``trainer.eval_prompts``), then step 0's training prompts (``prompts_per_step``)."""
    name = getattr(task, "name", "task")
    labelled: dict[str, LabelledPrompt] = {}
    batches = (
        ("eval", task.eval_problems(eval_prompts)),
        ("training", task.train_problems(seed, 0, prompts_per_step)),
    )
    for kind, problems in batches:
        for problem in problems:
            key = repr(problem.prompt)  # chat turns are not hashable
            where = f"task={name}: the {kind} prompt {problem.text!r}"
            labelled.setdefault(key, (problem.prompt, where))
    return list(labelled.values())
