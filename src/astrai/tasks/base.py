"""Base class for tasks with verifiable rewards: deterministic train stream and held-out eval set.

Every problem is a prompt string with one reference answer that ``answer`` recomputes from the
prompt text, so a reward never needs side-channel metadata. The eval split is a pure function of the
prompt (a salted SHA-256), so it is the same in every process and for every training seed, and the
training stream rejects held-out prompts.
"""

import abc
import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from astrai.chat import Prompt
from astrai.tasks.rewards import positional_match_reward

_EVAL_SALT = "astrai-eval"
_HASH_BUCKETS = 10_000
# Problem spaces up to this size are enumerated for the eval set; larger ones are sampled.
_MAX_ENUMERATED_PROBLEMS = 100_000
_EVAL_SHUFFLE_SEED = 12345
_EVAL_SAMPLE_SEED = 54321
# Rejection sampling gives up after this many draws per requested prompt (plus a floor), so a
# task whose split leaves no room fails loudly instead of looping forever.
_DRAWS_PER_PROMPT = 1_000
_MIN_DRAWS = 100_000


@dataclass(frozen=True)
class Problem:
    """One prompt with its reference answer, as the trainer samples and scores it.

    Attributes:
        prompt: what the policy is conditioned on: a string (one user turn) or chat turns.
        answer: the reference answer a reward compares with; None when the task has none.
        text: the prompt as one string, the ``prompts`` list every reward gets and what logs
            show (for chat turns, the last user turn's content).
    """

    prompt: Prompt
    answer: str | None
    text: str

    @property
    def messages(self) -> list[dict[str, str]]:
        """The whole conversation the policy answers, as fresh ``{role, content}`` dicts
        (system turn included; a string prompt is one user turn): what a reward that takes
        ``messages`` gets (``astrai.rewards.base``)."""
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return [{"role": t["role"], "content": t["content"]} for t in self.prompt]


class ProblemSource(Protocol):
    """What the trainer asks of a task (embedded ``Task`` or ``DatasetTask``)."""

    name: str

    def train_problems(self, seed: int, index: int, n: int) -> list[Problem]:
        """Batch ``index`` of the training stream: a pure function of its arguments."""
        ...

    def eval_problems(self, n: int) -> list[Problem]:
        """A fixed list of up to ``n`` held-out problems (never in the training stream)."""
        ...


def _stable_int(text: str) -> int:
    """Process-independent 64-bit integer hash of ``text`` (Python's ``hash`` is salted)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _max_draws(n: int) -> int:
    return max(_DRAWS_PER_PROMPT * n, _MIN_DRAWS)


class Task(abc.ABC):
    """A family of prompts with exactly checkable answers.

    Subclasses set ``name`` and implement ``answer``, ``_sample_problem``, ``_num_problems``,
    ``_enumerate_problems``, ``alphabet``, ``max_answer_len`` and ``max_prompt_len``.

    Args:
        eval_fraction: share of the problem space held out for evaluation, in (0, 1).
    """

    name: str

    def __init__(self, eval_fraction: float) -> None:
        if not 0.0 < eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        self.eval_fraction = eval_fraction

    # --- task-specific -------------------------------------------------------------------------

    @abc.abstractmethod
    def answer(self, prompt: str) -> str:
        """Reference answer parsed from ``prompt``; ValueError naming it if malformed."""

    @abc.abstractmethod
    def alphabet(self) -> str:
        """Every character a prompt or answer of this task can contain."""

    @abc.abstractmethod
    def max_answer_len(self) -> int:
        """Longest possible answer, in characters."""

    @abc.abstractmethod
    def max_prompt_len(self) -> int:
        """Longest possible prompt, in characters."""

    @abc.abstractmethod
    def _sample_problem(self, rng: random.Random) -> str:
        """Draw one prompt (held-out or not) using only ``rng``."""

    @abc.abstractmethod
    def _num_problems(self) -> int:
        """Number of distinct prompts the task can produce."""

    @abc.abstractmethod
    def _enumerate_problems(self) -> Iterator[str]:
        """All distinct prompts in a fixed order (only called for small problem spaces)."""

    # --- shared machinery ----------------------------------------------------------------------

    def is_held_out(self, prompt: str) -> bool:
        """True iff ``prompt`` belongs to the eval split (never served for training)."""
        bucket = _stable_int(_EVAL_SALT + prompt) % _HASH_BUCKETS
        return bucket < self.eval_fraction * _HASH_BUCKETS

    def split_sizes(self) -> tuple[int, int, bool]:
        """``(train prompts, held-out prompts, exact)``: counted where the problem space is
        enumerated for the eval split, else estimated from ``eval_fraction`` (``exact`` False).
        What the start banner says of the task."""
        total = self._num_problems()
        if total <= _MAX_ENUMERATED_PROBLEMS:
            held_out = len(self._enumerated_eval_pool)
            return total - held_out, held_out, True
        held_out = round(total * self.eval_fraction)
        return total - held_out, held_out, False

    def train_prompts(self, seed: int, index: int, n: int) -> list[str]:
        """Batch ``index`` of the training stream for ``seed``: ``n`` non-held-out prompts.

        Depends only on the task parameters, ``seed``, ``index`` and ``n``; prompts may repeat.
        """
        rng = random.Random(_stable_int(f"{self.name}:{seed}:{index}"))
        prompts: list[str] = []
        for _ in range(_max_draws(n)):
            if len(prompts) == n:
                break
            prompt = self._sample_problem(rng)
            if not self.is_held_out(prompt):
                prompts.append(prompt)
        if len(prompts) < n:
            raise RuntimeError(f"{self.name}: drew only {len(prompts)} of {n} training prompts")
        return prompts

    def train_problems(self, seed: int, index: int, n: int) -> list[Problem]:
        """``train_prompts`` with their reference answers."""
        return [Problem(p, self.answer(p), p) for p in self.train_prompts(seed, index, n)]

    def eval_problems(self, n: int) -> list[Problem]:
        """``eval_prompts`` with their reference answers."""
        return [Problem(p, self.answer(p), p) for p in self.eval_prompts(n)]

    def eval_prompts(self, n: int) -> list[str]:
        """A fixed list of up to ``n`` distinct held-out prompts, independent of any training seed.

        The list for a smaller ``n`` is a prefix of the list for a larger one.
        """
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if n == 0:
            return []
        if self._num_problems() <= _MAX_ENUMERATED_PROBLEMS:
            pool = self._enumerated_eval_pool
        else:
            pool = self._sampled_eval_pool(n)
        if not pool:
            raise ValueError(
                f"{self.name}: eval pool is empty (eval_fraction={self.eval_fraction})"
            )
        return pool[:n]

    @cached_property
    def _enumerated_eval_pool(self) -> list[str]:
        pool = [p for p in self._enumerate_problems() if self.is_held_out(p)]
        random.Random(_EVAL_SHUFFLE_SEED).shuffle(pool)
        return pool

    def _sampled_eval_pool(self, n: int) -> list[str]:
        rng = random.Random(_EVAL_SAMPLE_SEED)
        seen: dict[str, None] = {}  # insertion-ordered set
        for _ in range(_max_draws(n)):
            if len(seen) == n:
                break
            prompt = self._sample_problem(rng)
            if self.is_held_out(prompt):
                seen.setdefault(prompt)
        return list(seen)

    def reward(self, prompt: str, response: str) -> float:
        """Partial credit in [0, 1]: ``positional_match_reward`` against the reference answer."""
        return positional_match_reward(response, self.answer(prompt))

    def is_correct(self, prompt: str, response: str) -> bool:
        """Exact match against the reference answer (the eval metric)."""
        return response == self.answer(prompt)

    def _malformed(self, prompt: str) -> ValueError:
        return ValueError(f"{self.name}: malformed prompt {prompt!r}")
