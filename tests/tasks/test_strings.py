"""ReverseTask and SortTask: answers, rewards, lengths and argument checks."""

import pytest

from astrai.tasks import ReverseTask, SortTask


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [("rev 123=", "321"), ("rev 0012=", "2100"), ("rev 909=", "909")],
)
def test_reverse_answer(prompt: str, expected: str) -> None:
    assert ReverseTask().answer(prompt) == expected


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [("sort 312=", "123"), ("sort 9070=", "0079"), ("sort 555=", "555")],
)
def test_sort_answer(prompt: str, expected: str) -> None:
    assert SortTask().answer(prompt) == expected


@pytest.mark.parametrize(
    ("task", "prompt"),
    [
        (ReverseTask(), "rev 12="),  # too short for min_len=3
        (ReverseTask(), "rev 12345="),  # too long for max_len=4
        (ReverseTask(), "sort 123="),  # other task's keyword
        (ReverseTask(), "rev 12a="),
        (ReverseTask(), "rev 123"),
        (SortTask(), "sort123="),
        (SortTask(), "rev 123="),
    ],
)
def test_malformed_prompt_raises_naming_it(task: ReverseTask | SortTask, prompt: str) -> None:
    with pytest.raises(ValueError, match="malformed prompt") as info:
        task.answer(prompt)
    assert repr(prompt) in str(info.value)


def test_reward_and_is_correct() -> None:
    rev = ReverseTask()
    assert rev.reward("rev 123=", "321") == 1.0
    assert rev.reward("rev 123=", "123") == pytest.approx(1 / 3)  # only the middle "2" lines up
    assert rev.reward("rev 123=", "3210") == 0.75  # 3 matches / max(4, 3)
    assert rev.is_correct("rev 123=", "321") is True
    assert rev.is_correct("rev 123=", "32") is False
    srt = SortTask()
    assert srt.reward("sort 4312=", "1234") == 1.0
    assert srt.reward("sort 4312=", "4312") == 0.0
    assert srt.reward("sort 4312=", "12") == 0.5
    assert srt.is_correct("sort 4312=", "1234") is True


def test_lengths_and_alphabet() -> None:
    rev = ReverseTask(min_len=2, max_len=6)
    srt = SortTask(min_len=2, max_len=6)
    assert rev.max_answer_len() == 6
    assert srt.max_answer_len() == 6
    assert rev.max_prompt_len() == len("rev 123456=")
    assert srt.max_prompt_len() == len("sort 123456=")
    assert rev.alphabet() == " 0123456789=erv"
    assert srt.alphabet() == " 0123456789=orst"


@pytest.mark.parametrize("task_cls", [ReverseTask, SortTask])
def test_sampled_lengths_span_range(task_cls: type[ReverseTask] | type[SortTask]) -> None:
    task = task_cls(min_len=2, max_len=5)
    prompts = task.train_prompts(seed=0, index=0, n=500)
    lengths = {len(task.answer(p)) for p in prompts}
    assert lengths == {2, 3, 4, 5}
    used = set("".join(prompts) + "".join(task.answer(p) for p in prompts))
    assert used <= set(task.alphabet())


@pytest.mark.parametrize("task_cls", [ReverseTask, SortTask])
@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"min_len": 0}, "min_len"),
        ({"min_len": 5, "max_len": 4}, "max_len"),
        ({"eval_fraction": 0.0}, "eval_fraction"),
        ({"eval_fraction": 1.5}, "eval_fraction"),
    ],
)
def test_bad_constructor_args_raise(
    task_cls: type[ReverseTask] | type[SortTask], kwargs: dict, argument: str
) -> None:
    with pytest.raises(ValueError, match=argument):
        task_cls(**kwargs)
