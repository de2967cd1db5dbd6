"""``rollout.episodes.view``: an episode's tokens as the model saw them, special tokens kept and the
sampled spans marked, from its ``EpisodeTokens`` and from the ``Rollout`` it trained as."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.chat_families import write_family_tokenizer

from astrai.envs.episode_tokens import EpisodeTokens
from astrai.models.hf_tokenizer import HFTokenizer
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.episodes.view import (
    decode_kept,
    episode_view,
    marked_text,
    one_line,
    rollout_view,
)
from astrai.rollout.rollout import Rollout

CHAR = CharTokenizer()


def _chatml(tmp_path: Path) -> HFTokenizer:
    """Qwen3's tokenizer files (byte-level, ChatML's specials) with a plain ChatML template."""
    directory = write_family_tokenizer(tmp_path / "chatml", "qwen3")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
        "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return HFTokenizer.load(directory)


def _char_episode() -> EpisodeTokens:
    """``<bos>q:2*3`` then ``c`` sampled (and its stop), ``=6`` back, ``6`` sampled."""
    tokens = EpisodeTokens()
    tokens.add_context(CHAR.encode("q:2*3"), turn=0)
    tokens.add_sampled([*CHAR.encode("c", add_bos=False), CHAR.eos_id], [-0.1, -0.2], 0, 1)
    tokens.add_context(CHAR.encode("=6", add_bos=False), turn=1)
    tokens.add_sampled([*CHAR.encode("6", add_bos=False), CHAR.eos_id], [-0.3, -0.4], 0, 2)
    return tokens


def test_the_character_tokenizer_s_episode_keeps_its_specials() -> None:
    assert episode_view(CHAR, _char_episode()) == "<bos>q:2*3[[c<eos>]]=6[[6<eos>]]"
    assert CHAR.decode(_char_episode().ids) == "q:2*3c=66"  # what a reward reads: no specials


def test_a_chat_episode_shows_the_template_and_which_tokens_were_sampled(tmp_path: Path) -> None:
    """A Hermes call cut at ``</tool_call>`` (its ``<|im_end|>`` put in as context), the tool's
    reply, then an answer that sampled its own ``<|im_end|>``: the view is the conversation's
    text with the two sampled spans in ``[[ ]]``, newlines and special tokens as rendered."""
    tokenizer = _chatml(tmp_path)
    encode = lambda text: tokenizer.encode(text, False)  # noqa: E731
    tokens = EpisodeTokens()
    tokens.add_context(encode("<|im_start|>user\nkiwi?<|im_end|>\n<|im_start|>assistant\n"), 0)
    call = encode('<tool_call>\n{"name": "lookup", "arguments": {"word": "kiwi"}}\n</tool_call>')
    tokens.add_sampled(call, [0.0] * len(call), 0, 1)
    reply = "<|im_end|>\n<|im_start|>tool\n=47<|im_end|>\n<|im_start|>assistant\n"
    tokens.add_context(encode(reply), 1)
    answer = encode("47 ü<|im_end|>")  # a two-byte character, decoded whole within its span
    tokens.add_sampled(answer, [0.0] * len(answer), 0, 2)
    assert episode_view(tokenizer, tokens) == (
        "<|im_start|>user\nkiwi?<|im_end|>\n<|im_start|>assistant\n"
        '[[<tool_call>\n{"name": "lookup", "arguments": {"word": "kiwi"}}\n</tool_call>]]'
        "<|im_end|>\n<|im_start|>tool\n=47<|im_end|>\n<|im_start|>assistant\n"
        "[[47 ü<|im_end|>]]"
    )
    assert decode_kept(tokenizer, encode(" <|im_end|>\n")) == " <|im_end|>\n"  # nothing stripped
    assert tokenizer.decode(encode(" <|im_end|>\n")) == ""  # the reward's decode drops both


def test_marked_text_runs_and_its_errors() -> None:
    ids = CHAR.encode("abcd", add_bos=False)
    assert marked_text(CHAR, ids, [True, True, False, True]) == "[[ab]]c[[d]]"
    assert marked_text(CHAR, ids, [False] * 4) == "abcd"
    assert marked_text(CHAR, [], []) == ""
    with pytest.raises(ValueError, match="4 ids but 3 sampled flags"):
        marked_text(CHAR, ids, [True] * 3)
    assert one_line("a\nb\n") == "a\\nb\\n"


def test_a_rollout_row_shows_what_its_episode_showed() -> None:
    """An episode rollout (the opening as the left-padded prompt, the rest as the response,
    ``sampled_mask`` on the policy's tokens) gives each row the view of its episode."""
    episode = _char_episode()
    opening = episode.turns.count(0)
    rest = len(episode.ids) - opening
    prompt_ids = torch.zeros(1, opening + 2, dtype=torch.long)  # two pads on the left
    prompt_ids[0, 2:] = torch.tensor(episode.ids[:opening])
    prompt_mask = prompt_ids != 0
    prompt_mask[0, :2] = False
    response_ids = torch.zeros(1, 2, rest + 3, dtype=torch.long)  # row 1: a shorter episode
    response_mask = torch.zeros(1, 2, rest + 3, dtype=torch.bool)
    sampled = torch.zeros(1, 2, rest + 3, dtype=torch.bool)
    response_ids[0, 0, :rest] = torch.tensor(episode.ids[opening:])
    response_mask[0, 0, :rest] = True
    sampled[0, 0, :rest] = torch.tensor(episode.trainable[opening:])
    response_ids[0, 1, :2] = torch.tensor([*CHAR.encode("7", add_bos=False), CHAR.eos_id])
    response_mask[0, 1, :2], sampled[0, 1, :2] = True, True
    rollout = Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        logprobs=torch.zeros(1, 2, rest + 3),
        rewards=torch.zeros(1, 2),
        policy_version=0,
        sampled_mask=sampled,
    )
    assert rollout_view(CHAR, rollout, 0, 0) == episode_view(CHAR, episode)
    assert rollout_view(CHAR, rollout, 0, 1) == "<bos>q:2*3[[7<eos>]]"
    one_turn = Rollout(prompt_ids, prompt_mask, response_ids, response_mask,
                       rollout.logprobs, rollout.rewards, 0)  # fmt: skip
    with pytest.raises(ValueError, match="episode rollout"):
        rollout_view(CHAR, one_turn, 0, 0)
