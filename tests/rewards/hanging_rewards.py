"""Rewards that do not return, for the reward-boundary tests (``astrai.rewards.worker``).

Importable by path as ``_target_`` (``tests.rewards.hanging_rewards.<name>``): the repository
root is on ``sys.path`` in-process; a ``python train.py`` process needs it on ``PYTHONPATH``.
A response ``"hang"`` makes the unit-test rewards hang; the others score ``len(response)``."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

# ``$9^{9^{9^{9}}}$``: SymPy's big-integer arithmetic on it runs for minutes, in C
PATHOLOGICAL = "$9^{9^{9^{9}}}$"
# the rows of a training rollout under debug=quick (4 prompts x 2): the e2e rewards below spoil
# only those (the pre-run check scores 4 rows, the e2e runs evaluate 4 prompts)
TRAIN_ROWS = 8


def sleeps_on_hang(prompts: list[str], responses: list[str], answers: list) -> list[float]:
    """A reward blocked in ``time.sleep`` on a ``hang`` response."""
    if "hang" in responses:
        time.sleep(600)
    return [float(len(r)) for r in responses]


def backtracks_on_hang(prompts: list[str], responses: list[str], answers: list) -> list[float]:
    """A reward spinning in C (catastrophic regex backtracking, the GIL held) on ``hang``."""
    if "hang" in responses:
        re.match(r"(a+)+$", "a" * 40 + "b")
    return [float(len(r)) for r in responses]


def worker_pid(prompts: list[str], responses: list[str], answers: list) -> list[float]:
    """The process that scored: the reward worker's pid."""
    return [float(os.getpid())] * len(responses)


class InlinePid:
    """``worker_pid`` declared inline: it runs in the calling process."""

    inline = True

    def __call__(self, prompts: list[str], responses: list[str], answers: list) -> list[float]:
        return [float(os.getpid())] * len(responses)


def fails_then_hangs(prompts: list[str], responses: list[str], answers: list) -> list[float]:
    """Raises on a batch; each row alone hangs."""
    if len(responses) > 1:
        raise ValueError("batch")
    time.sleep(600)
    return [0.0]


def fails_on_bad(prompts: list[str], responses: list[str], answers: list) -> list[float]:
    if "bad" in responses:
        raise ZeroDivisionError("by zero")
    return [1.0] * len(responses)


def exits_on_bad(prompts: list[str], responses: list[str], answers: list) -> list[float]:
    if "bad" in responses:
        raise SystemExit(3)
    return [1.0] * len(responses)


def _spoiled(prompts: list[str], responses: list[str]) -> list[bool]:
    """Which rows a training rollout spoils: its first row, remembered in ``spoiled_row.txt``
    in the working directory (the run's), so that the same row re-scored alone (after the
    batch timed out and its worker was killed) is spoiled too."""
    marker = Path("spoiled_row.txt")
    if len(responses) == TRAIN_ROWS:
        marker.write_text(f"{prompts[0]}\n{responses[0]}")
    if not marker.exists():
        return [False] * len(responses)
    key = marker.read_text()
    return [f"{p}\n{r}" == key for p, r in zip(prompts, responses, strict=True)]


def math_with_a_pathological_answer(
    prompts: list[str], responses: list[str], answers: list
) -> list[float]:
    """``math_reward``, with a training rollout's first response replaced by ``PATHOLOGICAL``
    (the completion an e2e test forces)."""
    from astrai.rewards.math import math_reward  # here: the other rewards' workers skip SymPy

    spoiled = _spoiled(prompts, responses)
    responses = [PATHOLOGICAL if s else r for s, r in zip(spoiled, responses, strict=True)]
    return math_reward(prompts, responses, answers)


def backtracking_on_a_training_row(
    prompts: list[str], responses: list[str], answers: list
) -> list[float]:
    """1, 0, 1, 0... (a signal whatever was sampled), and a catastrophic regex on a training
    rollout's first row."""
    if any(_spoiled(prompts, responses)):
        re.match(r"(a+)+$", "a" * 40 + "b")
    return [float(i % 2 == 0) for i in range(len(responses))]


def sleeps_always(prompts: list[str], responses: list[str], answers: list) -> list[float]:
    """A reward that never returns, whatever it is asked."""
    time.sleep(600)
    return [0.0] * len(responses)
