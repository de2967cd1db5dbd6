"""``envs.episode_tokens``: an episode's tokens, trainable exactly where sampled, and equal to a
full re-render of its messages wherever the template probe says it is prefix-preserving
(issue 50, part 2), for the chat families the project ships (tests/chat_families.py: Qwen3 with
and without thinking, Llama 3.x) and ChatML (SmolLM2's)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tests.chat_families import CHATML, write_family_tokenizer

from astrai.envs.episode_tokens import EpisodeTokens, ObservationRenderer, template_problem
from astrai.models.hf_tokenizer import HFTokenizer

# (family directory, template kwargs, the assistant's end token as rendered)
CASES = {
    "chatml": ("qwen3", {}, "<|im_end|>"),
    "qwen3": ("qwen3", {}, "<|im_end|>"),
    "qwen3-no-thinking": ("qwen3", {"enable_thinking": False}, "<|im_end|>"),
    "llama3": ("llama3", {}, "<|eot_id|>"),
    "llama3_2": ("llama3_2", {}, "<|eot_id|>"),
}


def _tokenizer(tmp_path: Path, case: str) -> HFTokenizer:
    family, kwargs, _ = CASES[case]
    directory = write_family_tokenizer(tmp_path / case, family)
    if case == "chatml":
        config = json.loads((directory / "tokenizer_config.json").read_text())
        config["chat_template"] = CHATML
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return HFTokenizer.load(directory, template_kwargs=kwargs)


def _episode(rng: random.Random) -> tuple[list[dict], list[tuple[str, list[dict]]]]:
    """A user prompt and 1-4 turns: each the assistant's text and the messages that answer it."""
    words = ["12", "times", "34", "is", "408", "call", "tool", "x", "?", "ok"]
    say = lambda: " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))  # noqa: E731
    turns = []
    for _ in range(rng.randint(1, 4)):
        replies = [
            {"role": rng.choice(["tool", "user"]), "content": say()}
            for _ in range(rng.randint(1, 2))
        ]
        turns.append((say(), replies))
    return [{"role": "user", "content": say()}], turns


@pytest.mark.parametrize("case", sorted(CASES))
def test_sampled_tokens_are_the_trainable_ones_and_a_re_render_agrees(
    tmp_path: Path, case: str
) -> None:
    tokenizer = _tokenizer(tmp_path, case)
    end = CASES[case][2]

    def render(messages, generation):  # noqa: ANN001, ANN202
        return tokenizer.render_messages(messages, add_generation_prompt=generation)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    problem = template_problem(render, end)
    renderer = ObservationRenderer(render, encode, end)
    rng = random.Random(0)
    for _ in range(20):
        prompt, turns = _episode(rng)
        record, messages, sampled = EpisodeTokens(), list(prompt), []
        record.add_context(encode(render(messages, True)), turn=0)
        for turn, (text, replies) in enumerate(turns, start=1):
            ids = encode(text + end)  # what the engine samples: the text, then its stop token
            record.add_sampled(ids, [-0.5] * len(ids), version=3, turn=turn)
            sampled += ids
            if problem is None:
                record.add_context(renderer.ids(replies), turn=turn)
            messages += [{"role": "assistant", "content": text}, *replies]
        kept = [i for i, t in zip(record.ids, record.trainable, strict=True) if t]
        assert kept == sampled  # exactly the sampled tokens, stop tokens included
        assert set(record.versions[i] for i, t in enumerate(record.trainable) if t) == {3}
        if problem is None:
            assert record.ids == encode(render(messages, True)), case
    if case.startswith("qwen3"):  # an earlier assistant turn renders otherwise: refused
        assert problem is not None and problem.startswith("the chat template is not prefix")
    else:
        assert problem is None


def test_the_separator_is_context_and_the_record_checks_its_logprobs(tmp_path: Path) -> None:
    tokenizer = _tokenizer(tmp_path, "chatml")
    renderer = ObservationRenderer(
        lambda m, g: tokenizer.render_messages(m, add_generation_prompt=g),
        lambda text: tokenizer.encode(text, add_special_tokens=False),
        "<|im_end|>",
    )
    assert renderer.separator() == "\n"
    text = renderer.text([{"role": "tool", "content": "408"}])
    assert text == "\n<|im_start|>tool\n408<|im_end|>\n<|im_start|>assistant\n"
    record = EpisodeTokens()
    record.add_context([1, 2, 3], turn=0)
    record.add_sampled([4, 5], [-0.1, -0.2], version=0, turn=1)
    record.add_context([6, 7, 8], turn=1)
    assert record.trainable == [False] * 3 + [True] * 2 + [False] * 3
    assert record.turns == [0] * 3 + [1] * 5 and record.logprobs[3:5] == [-0.1, -0.2]
    with pytest.raises(ValueError, match="2 sampled ids but 1 logprobs"):
        record.add_sampled([1, 2], [0.0], version=0, turn=2)
