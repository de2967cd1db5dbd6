"""Rewards whose variance is built in, for tests that need a gradient from a short run of a
random model: such a model's answers to a real task may all score 0 (on one CPU and not on
another: its rounding decides), and then every group-normalised advantage is 0 and nothing
trains. These rewards do not look at the answer.

Use as ``reward=custom reward._target_=tests.constructed_rewards.alternating_reward`` (the
repository root is on ``sys.path`` in-process; a ``python train.py`` process needs it on
``PYTHONPATH``)."""

from __future__ import annotations

# the overrides that select it
ALTERNATING = ["reward=custom", "reward._target_=tests.constructed_rewards.alternating_reward"]


def alternating_reward(prompts: list[str], responses: list[str], answers: list[str]) -> list[float]:
    """1, 0, 1, 0, ... over the batch. Responses arrive prompt-major (each prompt's G
    responses side by side), so every group of G >= 2 holds both values: its rewards vary,
    whatever was sampled, and GRPO's advantages are +-1 (G even), never all 0."""
    del prompts, answers
    return [float(i % 2 == 0) for i in range(len(responses))]


# the overrides that select ``alternating_on_odd_prompts`` (its term is logged under that name)
ALTERNATING_ON_ODD_PROMPTS = [
    "reward=custom",
    "reward._target_=tests.constructed_rewards.alternating_on_odd_prompts",
]


def alternating_on_odd_prompts(
    prompts: list[str], responses: list[str], answers: list[str]
) -> list[float]:
    """``alternating_reward`` for the prompts that start with an odd digit (the addition task's
    ``"3+4="``), 0 for every other: some groups vary and some are constant, by the prompt alone
    and whatever was sampled, so dynamic sampling (``train_type.filter_groups``) both keeps and
    drops groups, deterministically."""
    del answers
    return [
        float(prompt[:1] in ("1", "3", "5", "7", "9") and i % 2 == 0)
        for i, (prompt, _) in enumerate(zip(prompts, responses, strict=True))
    ]


# the overrides that select ``constant_reward``: no signal at all (issue 45's watch)
CONSTANT = ["reward=custom", "reward._target_=tests.constructed_rewards.constant_reward"]


def constant_reward(prompts: list[str], responses: list[str], answers: list[str]) -> list[float]:
    """0.5 for every response: every group's rewards are equal, every GRPO advantage is 0 and
    nothing trains; what a run whose answers are all cut at the length limit sees."""
    del prompts, answers
    return [0.5] * len(responses)
