"""Qwen3 and Llama 3.x chat families end to end: their real chat templates render as
transformers renders them, responses end at each end-of-turn id ``generation_config.json``
declares (``<|im_end|>``; ``<|eot_id|>`` beside ``<|end_of_text|>``), and Qwen3's ``<think>``
tags stay text that reaches the reward, in ``task=dataset``, evaluation and ``astrai.generate``.

The tokenizer directories and tiny scripted models are written locally (``tests/chat_families``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers  # the hf extra; `make test` installs it
from tests.chat_families import FAMILIES, save_scripted_model, token_id, write_family_tokenizer
from tests.helpers import run_main

from astrai.chat import Prompt
from astrai.checkpoints.policy import load_policy
from astrai.generate import main as generate_main
from astrai.models.hf_tokenizer import HFTokenizer
from astrai.models.saved_tokenizer import load_tokenizer
from astrai.rewards.base import Reward, RewardTerm
from astrai.rollout.collect import left_pad
from astrai.rollout.engines.sampler import SamplingConfig, generate
from astrai.tasks.dataset import DatasetTask
from astrai.training.evaluation import evaluate

QUESTION = "What is 6*7?"
# a system turn to trim, and an earlier assistant turn whose reasoning Qwen3 drops from history
PROMPTS: dict[str, Prompt] = {
    "string": QUESTION,
    "system": [{"role": "system", "content": "  Be terse. "}, {"role": "user", "content": "6*7?"}],
    "history": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
    ],
}
# the greedy continuation of the scripted models after the prompt's last token (a newline)
QWEN_SCRIPT = ["\n", "<think>", "h", "</think>", "7"]
LLAMA_SCRIPT = ["\n", "4", "2"]
MAX_NEW_TOKENS = 8


def turns(prompt: Prompt) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: write_family_tokenizer(root / name, name) for name in FAMILIES}


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """``(family, last token)`` -> a model directory whose greedy response to any prompt is
    the family's script followed by that token (each written once per module)."""
    made: dict[tuple[str, str], Path] = {}

    def make(name: str, last: str) -> Path:
        if (name, last) not in made:
            script = QWEN_SCRIPT if name == "qwen3" else LLAMA_SCRIPT
            directory = tmp_path_factory.mktemp(name)
            made[name, last] = save_scripted_model(directory, name, [*script, last])
        return made[name, last]

    return make


def render_both(directory: Path, prompt: Prompt, **kwargs: Any) -> tuple[str, str]:
    """astrai's rendering of ``prompt`` and transformers' ``apply_chat_template`` (generation
    prompt appended); ``kwargs`` go to transformers only."""
    ours = load_tokenizer(directory)
    assert isinstance(ours, HFTokenizer)
    theirs = transformers.AutoTokenizer.from_pretrained(str(directory))
    for _ in range(2):  # Llama 3.2 writes today's date: two renders across midnight differ
        day = date.today()
        text = theirs.apply_chat_template(
            turns(prompt), tokenize=False, add_generation_prompt=True, **kwargs
        )
        rendered = ours.render_prompt(prompt)
        if date.today() == day:
            break
    return rendered, text


# --- 1. the templates render as transformers renders them ------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("name", FAMILIES)
def test_prompts_render_and_encode_as_transformers_does(
    family_dirs: dict[str, Path], name: str, prompt: str
) -> None:
    directory = family_dirs[name]
    rendered, text = render_both(directory, PROMPTS[prompt])
    assert rendered == text
    theirs = transformers.AutoTokenizer.from_pretrained(str(directory))
    ids = load_tokenizer(directory).encode_prompt(PROMPTS[prompt])
    assert ids == theirs(text, add_special_tokens=False).input_ids
    if name != "qwen3":  # BOS once: the text holds it, the post-processor must not add another
        bos = token_id(directory, "<|begin_of_text|>")
        assert ids[0] == bos and ids.count(bos) == 1
    if prompt == "history" and name == "qwen3":
        assert "add them" not in text and "<|im_start|>assistant\n4<|im_end|>" in text


def test_each_family_renders_its_own_layout(family_dirs: dict[str, Path]) -> None:
    qwen, _ = render_both(family_dirs["qwen3"], QUESTION)
    # thinking mode, Qwen3's default: no empty <think></think> block after the generation prompt
    assert qwen == f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    _, not_thinking = render_both(family_dirs["qwen3"], QUESTION, enable_thinking=False)
    assert not_thinking == qwen + "<think>\n\n</think>\n\n"
    _, thinking = render_both(family_dirs["qwen3"], QUESTION, enable_thinking=True)
    assert thinking == qwen

    turn = f"<|start_header_id|>user<|end_header_id|>\n\n{QUESTION}<|eot_id|>"
    opening = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    llama3, _ = render_both(family_dirs["llama3"], QUESTION)
    assert llama3 == f"<|begin_of_text|>{turn}{opening}"

    def system(day: str, message: str = "") -> str:
        return (
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            f"Cutting Knowledge Date: December 2023\nToday Date: {day}\n\n{message}<|eot_id|>"
        )

    llama3_1, _ = render_both(family_dirs["llama3_1"], QUESTION)
    assert llama3_1 == system("26 Jul 2024") + turn + opening
    days = {date.today()}
    llama3_2, _ = render_both(family_dirs["llama3_2"], PROMPTS["system"])
    days.add(date.today())
    user = "<|start_header_id|>user<|end_header_id|>\n\n6*7?<|eot_id|>"
    # strftime_now: today's date; the system turn trimmed into the header
    assert llama3_2 in {system(d.strftime("%d %b %Y"), "Be terse.") + user + opening for d in days}


# --- 2. stop ids -----------------------------------------------------------------------------

END_TOKENS = {
    "qwen3": ("<|im_end|>", "<|endoftext|>"),
    # eos_token <|end_of_text|>: <|eot_id|> ends a turn only through generation_config.json
    "llama3": ("<|end_of_text|>", "<|eot_id|>"),
    "llama3_1": ("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"),
    "llama3_2": ("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"),
}


@pytest.mark.parametrize("name", FAMILIES)
def test_stop_ids_are_the_familys_end_tokens(family_dirs: dict[str, Path], name: str) -> None:
    directory = family_dirs[name]
    tokenizer = load_tokenizer(directory)
    assert tokenizer.stop_ids == tuple(token_id(directory, t) for t in END_TOKENS[name])
    # what transformers' generate stops at
    declared = json.loads((directory / "generation_config.json").read_text())["eos_token_id"]
    assert set(tokenizer.stop_ids) == set(declared)
    if name == "qwen3":  # reasoning tags are text: neither an end nor dropped by decode
        think = [token_id(directory, t) for t in ("<think>", "</think>")]
        assert not set(think) & set(tokenizer.stop_ids)
        ids = [think[0], *tokenizer.encode("h", False), think[1], tokenizer.eos_id]
        assert tokenizer.decode(ids) == "<think>h</think>"


@pytest.mark.parametrize(
    ("name", "last", "length"),
    [
        ("qwen3", "<|im_end|>", 5),
        ("qwen3", "<|endoftext|>", 5),
        ("qwen3", "<|im_start|>", MAX_NEW_TOKENS),  # special, but no end: decoding goes on
        ("llama3", "<|eot_id|>", 3),
        ("llama3_2", "<|eot_id|>", 3),
        ("llama3_2", "<|end_of_text|>", 3),
        ("llama3_2", "<|eom_id|>", 3),
        ("llama3_2", "<|start_header_id|>", MAX_NEW_TOKENS),
    ],
)
def test_greedy_decoding_stops_where_transformers_stops(
    scripted: Callable[[str, str], Path], name: str, last: str, length: int
) -> None:
    directory = scripted(name, last)
    loaded = load_policy(directory)
    tokenizer = loaded.tokenizer
    ids, mask = left_pad(tokenizer, [QUESTION])
    greedy = SamplingConfig(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0)
    gen = generate(loaded.policy, ids, mask, greedy, tokenizer.stop_ids, tokenizer.pad_id)
    response = gen.response_ids[0, : int(gen.response_mask.sum())].tolist()
    assert len(response) == length
    # transformers' generate reads generation_config.json's eos_token_id list itself
    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=mask.long(), max_new_tokens=MAX_NEW_TOKENS, do_sample=False
        )
    assert response == out[0, ids.shape[1] :].tolist()
    end = token_id(directory, last)
    assert end in response  # emitted: the response ends with it exactly when it is an end id
    assert (response[-1] == end) == (length < MAX_NEW_TOKENS)


# --- 3. task=dataset, evaluation and astrai.generate ------------------------------------------


@pytest.mark.parametrize(
    ("name", "last", "answer"),
    [
        ("qwen3", "<|im_end|>", "<think>h</think>7"),
        ("llama3", "<|eot_id|>", "42"),
        ("llama3_2", "<|end_of_text|>", "42"),
    ],
)
def test_dataset_rows_are_evaluated_with_the_template_and_stop_ids(
    scripted: Callable[[str, str], Path], tmp_path: Path, name: str, last: str, answer: str
) -> None:
    directory = scripted(name, last)
    rows = [{"prompt": PROMPTS[k], "answer": "42"} for k in ("string", "system", "history")]
    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = DatasetTask(
        str(tmp_path / "train.jsonl"), str(tmp_path / "eval.jsonl"), 0.1, "prompt", "answer", None
    )
    loaded = load_policy(directory)
    assert task.check_tokens(loaded.tokenizer.encode_prompt, 200) is None  # every row renders
    seen: dict[str, list[str]] = {}

    def record(
        prompts: list[str], responses: list[str], answers: list[str | None], rendered_prompts: Any
    ) -> list[float]:
        seen.update(responses=responses, rendered=rendered_prompts)
        return [float(r == answer) for r in responses]

    reward = Reward([RewardTerm("seen", 1.0, record)], accuracy_threshold=1.0)
    problems = task.eval_problems(3)
    result = evaluate(loaded.policy, loaded.tokenizer, reward, problems, MAX_NEW_TOKENS)
    # the response as text, <think> tags kept, the end token dropped; each row stopped there
    assert seen["responses"] == [answer] * 3
    assert result.accuracy == 1.0
    assert result.response_len == (5 if name == "qwen3" else 3)
    theirs = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert seen["rendered"] == [
        theirs.apply_chat_template(turns(p.prompt), tokenize=False, add_generation_prompt=True)
        for p in problems
    ]


@pytest.mark.parametrize(
    ("name", "last", "answer"),
    [("qwen3", "<|endoftext|>", "<think>h</think>7"), ("llama3_2", "<|eot_id|>", "42")],
)
def test_generate_cli_answers_through_the_template_and_stops(
    scripted: Callable[[str, str], Path], name: str, last: str, answer: str
) -> None:
    directory = scripted(name, last)
    result = run_main(generate_main, [str(directory), QUESTION, "--max-new-tokens", "8"])
    assert result.returncode == 0, result.stderr
    # past the end token the model emits id 0 ('!'): a missed stop would print '...!!!'
    assert result.stdout.splitlines()[2:] == [f"{QUESTION!r} -> {answer!r}"]


# --- 5. template options (model.chat_template_kwargs), as apply_chat_template(**kwargs) --------


def test_template_kwargs_reach_the_template_as_transformers_passes_them(
    family_dirs: dict[str, Path],
) -> None:
    directory = family_dirs["qwen3"]
    theirs = transformers.AutoTokenizer.from_pretrained(str(directory))
    for kwargs in ({"enable_thinking": False}, {"enable_thinking": True}, {}):
        ours = load_tokenizer(directory, True, kwargs)
        for prompt in PROMPTS.values():
            expected = theirs.apply_chat_template(
                turns(prompt), tokenize=False, add_generation_prompt=True, **kwargs
            )
            assert ours.render_prompt(prompt) == expected
    off = load_tokenizer(directory, True, {"enable_thinking": False}).render_prompt(QUESTION)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # non-thinking mode


@pytest.mark.parametrize("key", ["messages", "add_generation_prompt", "eos_token", "1x"])
def test_template_kwargs_may_not_set_astrais_own_variables(
    family_dirs: dict[str, Path], key: str
) -> None:
    with pytest.raises(ValueError, match=f"chat_template_kwargs key '{key}'"):
        load_tokenizer(family_dirs["qwen3"], True, {key: False})


def test_a_checkpoint_keeps_its_runs_template_options(tmp_path: Path) -> None:
    """``astrai.generate`` / export read a checkpoint's tokenizer with the run's
    ``model.chat_template`` and ``model.chat_template_kwargs`` (older runs: True and {})."""
    from astrai.checkpoints.layout import RUN_CONFIG_FILE
    from astrai.checkpoints.policy import _run_chat_template

    assert _run_chat_template(tmp_path) == (True, {})  # unrecorded
    (tmp_path / RUN_CONFIG_FILE).write_text(
        "model:\n  chat_template: true\n  chat_template_kwargs: {enable_thinking: false}\n"
    )
    assert _run_chat_template(tmp_path) == (True, {"enable_thinking": False})
    (tmp_path / RUN_CONFIG_FILE).write_text("model:\n  chat_template: false\n")
    assert _run_chat_template(tmp_path) == (False, {})
