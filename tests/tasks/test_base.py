"""Task base class: deterministic training stream, fixed held-out eval set, disjoint splits."""

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator

import pytest

from astrai.tasks import AdditionTask, ReverseTask, SortTask, Task

TASKS = {
    "addition1": AdditionTask(num_digits=1),
    "addition3": AdditionTask(num_digits=3),  # 10**6 problems: sampled eval pool
    "reverse": ReverseTask(),
    "sort": SortTask(min_len=2, max_len=7),  # > 100_000 problems: sampled eval pool
}


@pytest.fixture(params=sorted(TASKS))
def task(request: pytest.FixtureRequest) -> Task:
    return TASKS[request.param]


def test_train_prompts_deterministic_across_calls_and_instances(task: Task) -> None:
    batch = task.train_prompts(seed=7, index=3, n=32)
    assert len(batch) == 32
    assert task.train_prompts(seed=7, index=3, n=32) == batch
    fresh = type(task)(**{k: v for k, v in vars(task).items() if not k.startswith("_")})
    assert fresh.train_prompts(seed=7, index=3, n=32) == batch


def test_train_prompts_change_with_index_and_seed(task: Task) -> None:
    batch = task.train_prompts(seed=7, index=3, n=32)
    assert task.train_prompts(seed=7, index=4, n=32) != batch
    assert task.train_prompts(seed=8, index=3, n=32) != batch


def test_train_prompts_same_in_subprocess() -> None:
    # A different PYTHONHASHSEED in the child proves the stream does not depend on hash().
    code = (
        "import json; from astrai.tasks import AdditionTask, ReverseTask, SortTask; "
        "print(json.dumps([AdditionTask(2).train_prompts(5, 11, 16), "
        "ReverseTask().train_prompts(5, 11, 16), SortTask().eval_prompts(16)]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    expected = [
        AdditionTask(2).train_prompts(5, 11, 16),
        ReverseTask().train_prompts(5, 11, 16),
        SortTask().eval_prompts(16),
    ]
    assert json.loads(out) == expected


def test_train_never_serves_eval_prompts(task: Task) -> None:
    eval_set = set(task.eval_prompts(10_000))
    train = [p for i in range(50) for p in task.train_prompts(seed=1, index=i, n=64)]
    assert len(train) == 3200
    assert not any(task.is_held_out(p) for p in train)
    assert eval_set.isdisjoint(train)


def test_eval_prompts_distinct_fixed_and_held_out(task: Task) -> None:
    prompts = task.eval_prompts(200)
    assert len(prompts) >= 13  # the smallest pool here, 1-digit addition, holds 13
    assert len(set(prompts)) == len(prompts)
    assert all(task.is_held_out(p) for p in prompts)
    assert all(task.answer(p) != "" for p in prompts)  # every eval prompt parses
    assert task.eval_prompts(200) == prompts
    assert task.eval_prompts(10) == prompts[:10]
    assert task.eval_prompts(0) == []


def test_large_eval_pool_returns_exactly_n() -> None:
    prompts = AdditionTask(num_digits=3).eval_prompts(500)
    assert len(prompts) == 500
    assert len(set(prompts)) == 500


@pytest.mark.parametrize(("num_digits", "fraction"), [(3, 0.2), (3, 0.4)])
def test_held_out_share_matches_eval_fraction(num_digits: int, fraction: float) -> None:
    task = AdditionTask(num_digits=num_digits, eval_fraction=fraction)
    rng = random.Random(0)
    draws = [task._sample_problem(rng) for _ in range(20_000)]
    share = sum(task.is_held_out(p) for p in draws) / len(draws)
    # Binomial std at n=20_000 is <= 0.0036; 0.015 is > 4 std.
    assert share == pytest.approx(fraction, abs=0.015)


def test_eval_prompts_rejects_negative_n() -> None:
    with pytest.raises(ValueError, match="n must be"):
        AdditionTask().eval_prompts(-1)


class _OnePromptTask(Task):
    """A task whose whole problem space is a single prompt, to hit the empty-split errors."""

    name = "one"

    def __init__(self, prompt: str, eval_fraction: float) -> None:
        super().__init__(eval_fraction)
        self.prompt = prompt

    def answer(self, prompt: str) -> str:
        if prompt != self.prompt:
            raise self._malformed(prompt)
        return "x"

    def alphabet(self) -> str:
        return "".join(sorted(set(self.prompt + "x")))

    def max_answer_len(self) -> int:
        return 1

    def max_prompt_len(self) -> int:
        return len(self.prompt)

    def _sample_problem(self, rng: random.Random) -> str:
        return self.prompt

    def _num_problems(self) -> int:
        return 1

    def _enumerate_problems(self) -> Iterator[str]:
        yield self.prompt


def _find_prompt(held_out: bool) -> str:
    probe = _OnePromptTask("", eval_fraction=0.5)
    return next(f"p{i}" for i in range(1000) if probe.is_held_out(f"p{i}") == held_out)


def test_empty_eval_pool_raises() -> None:
    task = _OnePromptTask(_find_prompt(held_out=False), eval_fraction=0.5)
    with pytest.raises(ValueError, match="eval pool is empty"):
        task.eval_prompts(5)
    assert task.train_prompts(seed=0, index=0, n=3) == [task.prompt] * 3


def test_all_held_out_train_stream_raises() -> None:
    task = _OnePromptTask(_find_prompt(held_out=True), eval_fraction=0.5)
    assert task.eval_prompts(5) == [task.prompt]
    with pytest.raises(RuntimeError, match="training prompts"):
        task.train_prompts(seed=0, index=0, n=3)
