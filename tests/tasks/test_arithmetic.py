"""AdditionTask: answers, rewards, alphabet and the held-out split of 1-digit addition."""

import pytest

from astrai.tasks import AdditionTask


@pytest.mark.parametrize(
    ("num_digits", "prompt", "expected"),
    [
        (1, "0+0=", "0"),
        (1, "9+9=", "18"),
        (1, "3+4=", "7"),
        (2, "12+7=", "19"),
        (2, "99+99=", "198"),
        (3, "500+0=", "500"),
    ],
)
def test_answer_parses_prompt(num_digits: int, prompt: str, expected: str) -> None:
    assert AdditionTask(num_digits=num_digits).answer(prompt) == expected


@pytest.mark.parametrize("prompt", ["12+7=", "3+4", "3-4=", "03+4=", "a+b=", "", " 3+4=", "3+4=5"])
def test_malformed_prompt_raises_naming_it(prompt: str) -> None:
    # "12+7=" is malformed for 1-digit addition (operand out of range); "03" has a leading zero.
    with pytest.raises(ValueError, match="malformed prompt") as info:
        AdditionTask(num_digits=1).answer(prompt)
    assert repr(prompt) in str(info.value)


def test_reward_and_is_correct() -> None:
    task = AdditionTask(num_digits=2)
    assert task.reward("12+7=", "19") == 1.0
    assert task.reward("12+7=", "18") == 0.5
    assert task.reward("12+7=", "190") == pytest.approx(2 / 3)
    assert task.reward("12+7=", "") == 0.0
    assert task.is_correct("12+7=", "19") is True
    assert task.is_correct("12+7=", "190") is False
    assert task.is_correct("12+7=", "19 ") is False


@pytest.mark.parametrize(("num_digits", "max_len"), [(1, 2), (2, 3), (3, 4)])
def test_max_answer_len(num_digits: int, max_len: int) -> None:
    task = AdditionTask(num_digits=num_digits)
    assert task.max_answer_len() == max_len
    # 9+9, 99+99, 999+999 reach it.
    nines = "9" * num_digits
    assert len(task.answer(f"{nines}+{nines}=")) == max_len
    assert task.max_prompt_len() == len(f"{nines}+{nines}=")


def test_alphabet_covers_prompts_and_answers() -> None:
    task = AdditionTask(num_digits=2)
    assert set(task.alphabet()) == set("0123456789+=")
    prompts = task.train_prompts(seed=0, index=0, n=200) + task.eval_prompts(200)
    used = set("".join(prompts) + "".join(task.answer(p) for p in prompts))
    assert used <= set(task.alphabet())


def test_one_digit_split_partitions_all_100_problems() -> None:
    task = AdditionTask(num_digits=1, eval_fraction=0.2)
    all_problems = {f"{a}+{b}=" for a in range(10) for b in range(10)}
    eval_set = set(task.eval_prompts(1000))
    train_set: set[str] = set()
    for index in range(100):
        train_set.update(task.train_prompts(seed=0, index=index, n=64))
    assert 10 <= len(eval_set) <= 30
    assert eval_set.isdisjoint(train_set)
    # 6,400 draws over the ~80 training problems see every one of them.
    assert eval_set | train_set == all_problems


def test_held_out_prompt_keeps_its_commuted_twin_in_training() -> None:
    task = AdditionTask(num_digits=2, eval_fraction=0.2)
    eval_set = task.eval_prompts(500)
    assert len(eval_set) == 500
    for prompt in eval_set:
        a, b = prompt[:-1].split("+")
        assert a != b  # doubles always train
        assert not task.is_held_out(f"{b}+{a}=")


def test_one_digit_eval_pool_is_fixed() -> None:
    # pinned so a change of the split (which changes what "held-out accuracy" means) is seen
    assert sorted(AdditionTask(num_digits=1).eval_prompts(100)) == [
        "0+2=", "0+9=", "1+6=", "2+6=", "3+1=", "3+2=", "4+0=",
        "4+5=", "5+6=", "6+9=", "7+1=", "8+7=", "9+5=",
    ]  # fmt: skip


def test_operands_cover_full_range() -> None:
    task = AdditionTask(num_digits=2)
    prompts = task.train_prompts(seed=3, index=0, n=2000)
    operands = {int(x) for p in prompts for x in p[:-1].split("+")}
    assert min(operands) == 0
    assert max(operands) == 99


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"num_digits": 0}, "num_digits"),
        ({"eval_fraction": 0.0}, "eval_fraction"),
        ({"eval_fraction": 1.0}, "eval_fraction"),
        ({"eval_fraction": 0.5}, "eval_fraction"),
        ({"eval_fraction": -0.1}, "eval_fraction"),
    ],
)
def test_bad_constructor_args_raise(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=argument):
        AdditionTask(**kwargs)
