"""``task.system_prompt`` with rows that have a system turn of their own (instruction rows, chat
turns that start with one): one system turn per prompt, the row's. A chat template that allows
one system turn renders every row; one that renders any number shows the row's alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import write_byte_level_tokenizer

from astrai.models.saved_tokenizer import load_tokenizer
from astrai.tasks.dataset import DatasetTask

# like the templates that take one system turn (Gemma's, Mistral's refuse what they cannot
# place): a second system turn raises
ONE_SYSTEM = (
    "{% if messages | selectattr('role', 'equalto', 'system') | list | length > 1 %}"
    "{{ raise_exception('Only one system message is supported') }}{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# renders every turn it is given, as ChatML templates do
ANY_SYSTEM = ONE_SYSTEM.split("{% endif %}", 1)[1]
SYSTEM_PROMPT = "Think step by step."


def _task(tmp_path: Path, rows: list[dict[str, Any]]) -> DatasetTask:
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"instruction": "Add.", "input": "9 + 9", "output": "18"}) + "\n")
    return DatasetTask(str(train), str(evals), 0.1, "prompt", "answer", SYSTEM_PROMPT)


def test_an_instruction_row_keeps_its_own_system_turn(tmp_path: Path) -> None:
    rows = [
        {"instruction": "Add the numbers.", "input": "2 + 3", "output": "5"},
        {"instruction": "Say hello.", "input": "", "output": "hello"},  # one user turn
    ]
    task = _task(tmp_path, rows)
    strict = load_tokenizer(write_byte_level_tokenizer(tmp_path / "strict", ONE_SYSTEM))
    task.check_tokens(strict.encode_prompt, max_prompt_tokens=10_000)  # no row refused

    loose = load_tokenizer(write_byte_level_tokenizer(tmp_path / "loose", ANY_SYSTEM))
    texts = [loose.render_prompt(p.prompt) for p in task.train + task.evals]
    assert texts == [
        "<|im_start|>system\nAdd the numbers.<|im_end|>\n<|im_start|>user\n2 + 3<|im_end|>\n"
        "<|im_start|>assistant\n",
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nSay hello.<|im_end|>\n"
        "<|im_start|>assistant\n",
        "<|im_start|>system\nAdd.<|im_end|>\n<|im_start|>user\n9 + 9<|im_end|>\n"
        "<|im_start|>assistant\n",
    ]
    assert task.system_prompt_line() == (
        "task: 2 rows have a system turn of their own, which wins over task.system_prompt "
        "(one system turn per prompt)"
    )


def test_chat_turns_with_a_system_turn_keep_theirs(tmp_path: Path) -> None:
    own = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "1 + 1?"}]
    rows = [{"prompt": own, "answer": "2"}, {"prompt": "2 + 2?", "answer": "4"}]
    task = _task(tmp_path, rows)
    strict = load_tokenizer(write_byte_level_tokenizer(tmp_path / "strict", ONE_SYSTEM))
    task.check_tokens(strict.encode_prompt, max_prompt_tokens=10_000)
    assert [[t["role"] for t in p.prompt] for p in task.train] == [
        ["system", "user"],
        ["system", "user"],
    ]
    assert [p.prompt[0]["content"] for p in task.train] == ["Be terse.", SYSTEM_PROMPT]
