"""``task=dataset``: local prompt files read with HF ``datasets`` (all written into tmp_path)."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import write_byte_level_tokenizer

from astrai.tasks import AdditionTask, ReverseTask, Task
from astrai.tasks.base import Problem
from astrai.tasks.dataset import DatasetError, DatasetTask, prompt_text, read_rows

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# --- helpers -----------------------------------------------------------------------------------


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def task(train: Path, eval_path: Path | None = None, **kwargs: Any) -> DatasetTask:
    args: dict[str, Any] = {
        "eval_fraction": 0.1,
        "prompt_key": "prompt",
        "answer_key": "answer",
        "system_prompt": None,
    }
    args.update(kwargs)
    return DatasetTask(str(train), None if eval_path is None else str(eval_path), **args)


def held_out(key: str, fraction: float) -> bool:
    """The spec's split, recomputed: a salted SHA-256 of the prompt into 10_000 buckets."""
    digest = hashlib.sha256(("astrai-eval" + key).encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10_000 < fraction * 10_000


def read_problems(path: Path, **kwargs: Any) -> list[Problem]:
    """Every row of ``path`` as a training problem, in file order (the eval rows come from a
    file of their own)."""
    evals = write_jsonl(
        path.with_name("only-eval.jsonl"),
        [{kwargs.get("prompt_key", "prompt"): "zz", "answer": "0"}],
    )
    return task(path, evals, **kwargs).train


def prompts_of(problems: list[Problem]) -> list[Any]:
    return [p.prompt for p in problems]


def records(n: int) -> list[dict[str, Any]]:
    return [{"prompt": f"what is {i} + {i}?", "answer": 2 * i} for i in range(n)]


def with_train_rows(tmp_path: Path, n: int) -> DatasetTask:
    """Exactly ``n`` training rows (the eval file holds two other prompts)."""
    train = write_jsonl(tmp_path / "train.jsonl", records(n))
    evals = write_jsonl(
        tmp_path / "eval.jsonl", [{"prompt": "e1", "answer": 1}, {"prompt": "e2", "answer": 2}]
    )
    return task(train, evals)


# --- 1. formats --------------------------------------------------------------------------------


def test_every_format_gives_the_same_problems(tmp_path: Path) -> None:
    import datasets

    rows = records(30)
    paths = [write_jsonl(tmp_path / "d.jsonl", rows)]
    (tmp_path / "d.json").write_text(json.dumps(rows))
    paths.append(tmp_path / "d.json")
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    paths.append(tmp_path / "d.parquet")
    with (tmp_path / "d.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["prompt", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    paths.append(tmp_path / "d.csv")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    paths.append(tmp_path / "saved")

    expected_evals = [r for r in rows if held_out(r["prompt"], 0.2)]
    assert 0 < len(expected_evals) < 30  # both sides non-empty for this file
    results = {path.name: task(path, eval_fraction=0.2) for path in paths}
    for name, t in results.items():
        assert [(p.prompt, p.answer, p.text) for p in t.evals] == [
            (r["prompt"], str(r["answer"]), r["prompt"]) for r in expected_evals
        ], name
        assert len(t.train) + len(t.evals) == 30, name
    first = results["d.jsonl"]
    for name, t in results.items():
        assert t.train == first.train and t.evals == first.evals, name
        assert t.train_problems(3, 1, 7) == first.train_problems(3, 1, 7), name


def test_a_dataset_dict_folder_and_an_unknown_suffix_are_refused(tmp_path: Path) -> None:
    import datasets

    split = datasets.Dataset.from_list(records(4))
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DatasetError, match=r"holds the splits \['test', 'train'\]") as err:
        task(tmp_path / "dd")
    assert str(err.value).startswith("task.train_path: ")
    assert f"{tmp_path / 'dd'}/train" in str(err.value)  # points at one split

    (tmp_path / "d.txt").write_text("what is 1 + 1?\n")
    with pytest.raises(DatasetError, match=r"task.train_path: .*d\.txt: unknown format '\.txt'"):
        task(tmp_path / "d.txt")


# --- 2. prompt shapes --------------------------------------------------------------------------


def test_a_string_prompt_is_one_user_turn(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "hi there", "answer": "yo"}])
    [problem] = read_problems(path)
    assert problem == Problem("hi there", "yo", "hi there")


def test_chat_turns_keep_their_roles_and_text_is_the_last_user_turn(tmp_path: Path) -> None:
    turns = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second"},
    ]
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": turns, "answer": "2"}])
    [problem] = read_problems(path)
    assert problem.prompt == tuple(turns)
    assert problem.text == "second" == prompt_text(problem.prompt)
    assert problem.answer == "2"


def test_turns_ending_with_the_assistant_are_refused(tmp_path: Path) -> None:
    user = [{"role": "user", "content": "q"}]
    bad = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"prompt": user, "answer": "1"}, {"prompt": bad, "answer": "1"}]
    )
    message = re.escape(f"{path} row 2: 'prompt': the last turn must be the user's")
    with pytest.raises(DatasetError, match=message + r".*'assistant'"):
        task(path)


def test_instruction_records_become_system_and_user_turns(tmp_path: Path) -> None:
    rows = [
        {"instruction": "Add the numbers.", "input": "2 + 3", "output": 5},
        {"instruction": "Say hello.", "input": "", "output": "hello"},
    ]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    first, second = read_problems(path)
    assert first == Problem(
        (
            {"role": "system", "content": "Add the numbers."},
            {"role": "user", "content": "2 + 3"},
        ),
        "5",
        "2 + 3",
    )
    assert second == Problem("Say hello.", "hello", "Say hello.")  # the instruction alone
    with_system = read_problems(path, system_prompt="Be exact.")
    assert with_system[1].prompt == (
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "Say hello."},
    )
    # the row's own system turn (its instruction) wins: one system turn, never two
    assert with_system[0].prompt == first.prompt
    assert [p.answer for p in read_problems(path, answer_key=None)] == [None, None]


def test_system_prompt_comes_first(tmp_path: Path) -> None:
    turns = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    turns.append({"role": "user", "content": "c"})
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"prompt": "q?", "answer": "1"}, {"prompt": turns, "answer": "2"}]
    )
    plain, chat = read_problems(path, system_prompt="Be brief.")
    system = {"role": "system", "content": "Be brief."}
    assert plain == Problem((system, {"role": "user", "content": "q?"}), "1", "q?")
    assert chat == Problem((system, *turns), "2", "c")


def test_numeric_answers_become_text(tmp_path: Path) -> None:
    import datasets

    rows = [{"prompt": "a", "answer": 72}, {"prompt": "b", "answer": -3}]
    jsonl = write_jsonl(tmp_path / "d.jsonl", rows)
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    for path in (jsonl, tmp_path / "d.parquet"):
        assert [p.answer for p in read_problems(path)] == ["72", "-3"], path.name
    # a column with a fraction is read as floats: its whole numbers stay "72", not "72.0"
    mixed = write_jsonl(
        tmp_path / "m.jsonl", [{"prompt": "a", "answer": 72}, {"prompt": "b", "answer": 2.5}]
    )
    assert [p.answer for p in read_problems(mixed)] == ["72", "2.5"]
    flag = write_jsonl(tmp_path / "b.jsonl", [{"prompt": "a", "answer": True}])
    with pytest.raises(DatasetError, match=r"row 1: 'answer': text was expected, got bool"):
        read_problems(flag)


def test_no_answer_key_gives_no_answers(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": f"p{i}"} for i in range(50)])
    t = task(path, answer_key=None, eval_fraction=0.3)
    assert t.train and t.evals
    assert {p.answer for p in t.train + t.evals} == {None}


# --- 3. the eval split -------------------------------------------------------------------------


def test_hash_split_is_disjoint_sized_and_positional_independent(tmp_path: Path) -> None:
    rows = [{"prompt": f"question {i}", "answer": str(i)} for i in range(1000)]
    t = task(write_jsonl(tmp_path / "a.jsonl", rows), eval_fraction=0.1)
    train, evals = set(prompts_of(t.train)), set(prompts_of(t.evals))
    assert not train & evals
    assert len(train) + len(evals) == 1000
    assert 70 <= len(evals) <= 130  # 0.1 of 1000 within 3 standard deviations
    # exactly the spec's hash, and the embedded tasks' (base) split of the same strings
    assert evals == {r["prompt"] for r in rows if held_out(r["prompt"], 0.1)}
    embedded = ReverseTask(eval_fraction=0.1)
    assert evals == {r["prompt"] for r in rows if Task.is_held_out(embedded, r["prompt"])}
    # eval order is the file's order
    assert prompts_of(t.evals) == [r["prompt"] for r in rows if r["prompt"] in evals]

    shuffled = rows[:]
    random.Random(0).shuffle(shuffled)
    s = task(write_jsonl(tmp_path / "b.jsonl", shuffled), eval_fraction=0.1)
    assert set(prompts_of(s.evals)) == evals and set(prompts_of(s.train)) == train
    assert prompts_of(s.evals) == [r["prompt"] for r in shuffled if r["prompt"] in evals]


def test_duplicates_of_a_prompt_land_on_one_side(tmp_path: Path) -> None:
    base = [{"prompt": f"question {i}", "answer": str(i)} for i in range(200)]
    rows = base + base[::-1] + base[::3]
    t = task(write_jsonl(tmp_path / "d.jsonl", rows), eval_fraction=0.3)
    evals = prompts_of(t.evals)
    assert not set(evals) & set(prompts_of(t.train))
    counts = {r["prompt"]: 0 for r in base}
    for r in rows:
        counts[r["prompt"]] += 1
    for prompt in set(evals):
        assert evals.count(prompt) == counts[prompt]
    assert len(t.train) + len(evals) == len(rows)


def test_an_eval_file_removes_its_prompts_from_training(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", records(20))
    eval_rows = [
        records(20)[7],
        {"prompt": "new one", "answer": 1},
        records(20)[2],
        records(20)[15],
    ]
    evals = write_jsonl(tmp_path / "eval.jsonl", eval_rows)
    t = task(train, evals, eval_fraction=0.0)  # the fraction is unused with an eval file
    assert prompts_of(t.evals) == [r["prompt"] for r in eval_rows]
    assert prompts_of(t.eval_problems(2)) == [eval_rows[0]["prompt"], "new one"]
    dropped = {eval_rows[i]["prompt"] for i in (0, 2, 3)}
    assert prompts_of(t.train) == [r["prompt"] for r in records(20) if r["prompt"] not in dropped]
    assert len(t.train) == 17


# --- 4. the training stream --------------------------------------------------------------------


def test_the_stream_is_a_pure_function_of_seed_index_and_n(tmp_path: Path) -> None:
    one, two = with_train_rows(tmp_path, 40), with_train_rows(tmp_path, 40)
    later = two.train_problems(seed=3, index=4, n=8)  # asked first, out of order
    assert [one.train_problems(3, i, 8) for i in range(6)] == [
        two.train_problems(3, i, 8) for i in range(6)
    ]
    assert one.train_problems(3, 4, 8) == later


def test_each_epoch_covers_every_training_row_once(tmp_path: Path) -> None:
    t = with_train_rows(tmp_path, 40)
    every = sorted(p.text for p in t.train)
    assert len(set(every)) == 40
    epoch0 = [p.text for i in range(5) for p in t.train_problems(7, i, 8)]
    epoch1 = [p.text for i in range(5, 10) for p in t.train_problems(7, i, 8)]
    assert sorted(epoch0) == every and sorted(epoch1) == every
    assert epoch0 != epoch1  # each epoch its own shuffle
    assert epoch0 != [p.text for p in t.train]  # shuffled, not file order
    other = [p.text for i in range(5) for p in t.train_problems(8, i, 8)]
    assert sorted(other) == every and other != epoch0
    # a batch larger than the file wraps into the next epochs, in the same stream
    big = [p.text for p in t.train_problems(7, 0, 100)]
    assert big[:80] == epoch0 + epoch1
    assert len(big) == 100 and len(set(big[80:])) == 20
    second = [p.text for p in t.train_problems(7, 1, 60)]  # positions 60..119
    assert second[:20] == epoch1[20:]


# --- 5. bad input ------------------------------------------------------------------------------


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(DatasetError, match=re.escape(f"task.train_path: {missing} does not exist")):
        task(missing)
    train = write_jsonl(tmp_path / "t.jsonl", records(3))
    with pytest.raises(DatasetError, match=re.escape(f"task.eval_path: {missing} does not exist")):
        task(train, missing)


def test_unreadable_jsonl_rows_are_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text(
        '{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": "2"}\n{"prompt": \n'
    )
    with pytest.raises(
        DatasetError, match=re.escape(f"task.train_path: {broken}: row 3: unreadable JSON")
    ):
        task(broken)
    array = tmp_path / "array.jsonl"
    array.write_text('{"prompt": "a", "answer": "1"}\n["b", "2"]\n')
    with pytest.raises(
        DatasetError, match=re.escape(f"{array}: row 2: a JSON object was expected, got ['b'")
    ):
        task(array)


def test_missing_columns_are_named(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "a", "answer": "1"}])
    with pytest.raises(
        DatasetError,
        match=re.escape(
            f"task.train_path: {path} has no column 'prompt' (task.prompt_key); its columns: "
            "['answer', 'question']"
        ),
    ):
        task(path)
    assert read_problems(path, prompt_key="question") == [Problem("a", "1", "a")]

    path = write_jsonl(tmp_path / "e.jsonl", [{"prompt": "a", "solution": "1"}])
    with pytest.raises(
        DatasetError,
        match=re.escape(f"{path} has no column 'answer' (task.answer_key;")
        + r".*its columns: \['prompt', 'solution'\]",
    ):
        task(path)


def test_empty_prompts_and_missing_answers_name_the_row(tmp_path: Path) -> None:
    rows = records(5)
    rows[1]["prompt"] = "  "
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    with pytest.raises(DatasetError, match=re.escape(f"{path} row 2: 'prompt' is empty")):
        task(path)
    rows = records(5)
    rows[3]["answer"] = None
    path = write_jsonl(tmp_path / "a.jsonl", rows)
    with pytest.raises(DatasetError, match=re.escape(f"{path} row 4: 'answer' is missing")):
        task(path)
    csv_path = tmp_path / "c.csv"
    csv_path.write_text("prompt,answer\na,1\n,2\n")  # an empty CSV cell is a null
    with pytest.raises(DatasetError, match=re.escape(f"{csv_path} row 2: 'prompt'")):
        task(csv_path)


@pytest.mark.parametrize("name", ["e.jsonl", "e.json", "e.csv", "e.parquet"])
def test_an_empty_file_has_no_rows(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("\n" if name.endswith("jsonl") else "")
    with pytest.raises(DatasetError, match=re.escape(f"task.train_path: {path} has no rows")):
        task(path)
    assert read_rows(path, "task.train_path") == []


def test_a_split_without_training_or_eval_rows_is_refused(tmp_path: Path) -> None:
    prompts = [f"p{i}" for i in range(200)]
    inside = next(p for p in prompts if held_out(p, 0.5))
    outside = next(p for p in prompts if not held_out(p, 0.5))
    all_eval = write_jsonl(tmp_path / "in.jsonl", [{"prompt": inside, "answer": "1"}] * 2)
    with pytest.raises(
        DatasetError,
        match=re.escape(f"task.train_path {all_eval} (task.eval_fraction=0.5): no training rows"),
    ):
        task(all_eval, eval_fraction=0.5)
    no_eval = write_jsonl(tmp_path / "out.jsonl", [{"prompt": outside, "answer": "1"}])
    with pytest.raises(
        DatasetError,
        match=re.escape(f"task.train_path {no_eval} (task.eval_fraction=0.5): no eval rows"),
    ):
        task(no_eval, eval_fraction=0.5)
    same = write_jsonl(tmp_path / "same.jsonl", records(5))
    with pytest.raises(
        DatasetError, match=re.escape("(less the prompts of task.eval_path): no training rows")
    ):
        task(same, same)


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_eval_fraction_must_be_inside_zero_one(tmp_path: Path, fraction: float) -> None:
    with pytest.raises(
        DatasetError, match=re.escape(f"task.eval_fraction must be in (0, 1), got {fraction}")
    ):
        task(tmp_path / "never-read.jsonl", eval_fraction=fraction)


# --- 6. check_characters (a character tokenizer) -----------------------------------------------


ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz +-*=:,.?"


def test_check_characters_names_the_character_row_and_file(tmp_path: Path) -> None:
    rows = records(40)
    clean = task(write_jsonl(tmp_path / "clean.jsonl", rows), eval_fraction=0.3)
    assert clean.check_characters(ALPHABET, max_prompt_chars=20) is None
    rows[5]["answer"] = "Yes!"  # answers are read by rewards, never tokenized: not checked
    rows_ok = task(write_jsonl(tmp_path / "answers.jsonl", rows), eval_fraction=0.3)
    assert rows_ok.check_characters(ALPHABET, None) is None
    rows[2]["prompt"] = "what is X + 1?"
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(
        DatasetError,
        match=re.escape(f"{path} row 3: the prompt has the character 'X'") + ".*lacks",
    ):
        task(path, eval_fraction=0.3).check_characters(ALPHABET, None)


def test_check_characters_refuses_chat_turns_and_long_prompts(tmp_path: Path) -> None:
    from astrai.models.tokenizer import CharTokenizer

    turns = [{"role": "user", "content": "1 + 1?"}]
    rows = [{"prompt": "1 + 2?", "answer": "3"}, {"prompt": turns, "answer": "2"}]
    path = write_jsonl(tmp_path / "chat.jsonl", rows)
    t = task(path, eval_path=write_jsonl(tmp_path / "e.jsonl", [{"prompt": "9?", "answer": "9"}]))
    with pytest.raises(DatasetError, match=re.escape(f"{path} row 2: chat turns")):
        t.check_characters(ALPHABET, None)
    with pytest.raises(ValueError, match="chat template"):  # what the check stands in for
        CharTokenizer().encode_prompt(t.train[1].prompt)

    plain = write_jsonl(tmp_path / "plain.jsonl", [rows[0]])
    eval_file = write_jsonl(tmp_path / "e2.jsonl", [{"prompt": "7?", "answer": "7"}])
    t = task(plain, eval_file, system_prompt="be brief")
    with pytest.raises(DatasetError, match=re.escape(f"{plain} row 1: chat turns")):
        t.check_characters(ALPHABET, None)

    long = write_jsonl(
        tmp_path / "long.jsonl", [rows[0], {"prompt": "1 + 1 + 1 + 1?", "answer": "4"}]
    )
    t = task(long, eval_file)
    with pytest.raises(
        DatasetError,
        match=re.escape(f"{long} row 2: the prompt has 14 characters") + ".* 10 .*filter_overlong",
    ):
        t.check_characters(ALPHABET, max_prompt_chars=10)
    assert t.check_characters(ALPHABET, max_prompt_chars=14) is None


# --- 7. chat templates -------------------------------------------------------------------------


def chat_tokenizer(directory: Path) -> Any:
    """A byte-level BPE tokenizer with ChatML specials and template (like SmolLM2's)."""
    from astrai.models.saved_tokenizer import load_tokenizer

    return load_tokenizer(write_byte_level_tokenizer(directory, CHATML))


def test_prompts_go_through_the_chat_template(tmp_path: Path) -> None:
    tok = chat_tokenizer(tmp_path / "tok")
    turns = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2 + 2?"}]
    rows = [{"prompt": "What is 12+9?", "answer": 21}, {"prompt": turns, "answer": 4}]
    string, chat = read_problems(write_jsonl(tmp_path / "d.jsonl", rows))

    # a string prompt: exactly the embedded tasks' path
    embedded = AdditionTask(num_digits=1).train_problems(0, 0, 1)[0]
    assert tok.encode_prompt(embedded.prompt) == tok.encode(
        tok.render_prompt(embedded.prompt), add_special_tokens=False
    )
    rendered = tok.render_prompt(string.prompt)
    assert rendered == (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\nWhat is 12+9?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.encode_prompt(string.prompt) == tok.encode(rendered, add_special_tokens=False)
    # chat turns: the template over the turns, generation prompt appended
    expected = tok.render_messages(turns, add_generation_prompt=True)
    assert expected == (
        "<|im_start|>system\nBe terse.<|im_end|>\n"
        "<|im_start|>user\n2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.encode_prompt(chat.prompt) == tok.encode(expected, add_special_tokens=False)
    assert tok.encode_prompt(chat.prompt).count(1) == 3  # <|im_start|> is one special id

    [with_system] = read_problems(write_jsonl(tmp_path / "s.jsonl", rows[:1]), system_prompt="Sum.")
    text = tok.render_prompt(with_system.prompt)
    assert text.index("<|im_start|>system\nSum.<|im_end|>") < text.index("<|im_start|>user\n")
    assert "You are helpful." not in text


def test_the_worked_example_presets_compose_and_the_tiny_one_validates() -> None:
    """``experiment=word_problems_tiny`` reads the shipped file and passes the character
    checks; ``experiment=word_problems`` (SmolLM2, needs ``make smollm2``) composes."""
    from tests.helpers import compose_config

    from astrai.paths import REPO_ROOT

    tiny = compose_config(["experiment=word_problems_tiny"])  # validates: reads the file
    task = DatasetTask(**{k: v for k, v in tiny.task.items() if k != "_target_"})
    assert tiny.reward._target_.endswith("partial_credit")
    assert len(task.train) + len(task.evals) == 2500 and 200 <= len(task.evals) <= 300
    assert task.train[0].answer is not None and "####" in task.train[0].answer
    smol = compose_config(["experiment=word_problems"], validate=False)
    assert smol.model.path == "models/smollm2" and smol.reward._target_.endswith("math_reward")
    assert (REPO_ROOT / smol.task.train_path).stat().st_size <= 300_000


def test_the_shipped_example_files_are_what_the_script_writes(tmp_path: Path) -> None:
    import importlib.util

    from astrai.paths import REPO_ROOT

    folder = REPO_ROOT / "examples" / "word_problems"
    spec = importlib.util.spec_from_file_location("generate_word_problems", folder / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    for name, (make, count, seed) in generate.FILES.items():
        generate.write(tmp_path / name, make, count, seed)
        assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), name
