"""An episode as the model saw it (issue 58): its token ids decoded with the special tokens kept
(the chat template's scaffold: ``<|im_start|>``, ``<|im_end|>``, ``<|eot_id|>``), the tokens the
policy sampled wrapped in ``[[`` ... ``]]``, everything else (the opening with its system
message and tools, the template's turn headers and separators, the observations, an end token
put in as context) as it is::

    <|im_start|>system
    # Tools ... <|im_end|>
    <|im_start|>user
    code of kiwi?<|im_end|>
    <|im_start|>assistant
    [[<tool_call>
    {"name": "lookup", "arguments": {"word": "kiwi"}}
    </tool_call>]]<|im_end|>
    <|im_start|>user
    <tool_response>
    =47
    </tool_response><|im_end|>
    <|im_start|>assistant
    [[47<|im_end|>]]

Here the first turn stopped at ``</tool_call>`` (the runner's stop string), so its
``<|im_end|>`` is context, outside the marks; the last turn sampled its own. The marks are text
added to the view, never tokens: a sampled ``[[`` shows as ``[[[[``.

Each run of sampled tokens is decoded on its own, and so is each run of context: a character
whose bytes a byte-level tokenizer split between a sampled and a context token shows as a
replacement character (the template's turns begin and end on token boundaries).

Used by ``python -m astrai.generate --show-tokens`` and by the rollout samples an episode run
logs (``training.rollout_stats.logged_samples``).
"""

from __future__ import annotations

from collections.abc import Sequence

from astrai.envs.episode_tokens import EpisodeTokens
from astrai.models.hf_tokenizer import HFTokenizer
from astrai.models.tokenizer import SPECIAL_TOKENS, CharTokenizer, Tokenizer
from astrai.rollout.rollout import Rollout

SAMPLED_OPEN, SAMPLED_CLOSE = "[[", "]]"


def decode_kept(tokenizer: Tokenizer, ids: list[int]) -> str:
    """``ids`` as text with the special tokens kept and nothing stripped (``decode`` drops
    both: what a reward reads)."""
    if isinstance(tokenizer, HFTokenizer):
        # the same ``tokenizers`` decoder as HFTokenizer.decode, special tokens kept
        return str(tokenizer._tokenizer.decode(ids, skip_special_tokens=False))
    if isinstance(tokenizer, CharTokenizer):
        specials = len(SPECIAL_TOKENS)
        return "".join(
            SPECIAL_TOKENS[i] if 0 <= i < specials else tokenizer.decode([i]) for i in ids
        )
    return tokenizer.decode(ids)


def marked_text(tokenizer: Tokenizer, ids: Sequence[int], sampled: Sequence[bool]) -> str:
    """``ids`` decoded (``decode_kept``), each run of ``sampled`` tokens in ``[[`` ``]]``."""
    if len(ids) != len(sampled):
        raise ValueError(f"{len(ids)} ids but {len(sampled)} sampled flags")
    parts, start = [], 0
    for end in range(1, len(ids) + 1):
        if end == len(ids) or sampled[end] != sampled[start]:
            text = decode_kept(tokenizer, list(ids[start:end]))
            parts.append(f"{SAMPLED_OPEN}{text}{SAMPLED_CLOSE}" if sampled[start] else text)
            start = end
    return "".join(parts)


def episode_view(tokenizer: Tokenizer, tokens: EpisodeTokens) -> str:
    """One episode's tokens as the model saw them, its sampled tokens marked."""
    return marked_text(tokenizer, tokens.ids, tokens.trainable)


def rollout_view(tokenizer: Tokenizer, rollout: Rollout, b: int, g: int) -> str:
    """Episode ``g`` of prompt ``b`` of an episode rollout (``sampled_mask`` set): its opening
    (the prompt's real tokens) and its response's, the sampled ones marked."""
    if rollout.sampled_mask is None:
        raise ValueError("rollout_view takes an episode rollout (sampled_mask)")
    prompt = rollout.prompt_ids[b][rollout.prompt_mask[b]].tolist()
    real = rollout.response_mask[b, g]
    response = rollout.response_ids[b, g][real].tolist()
    sampled = rollout.sampled_mask[b, g][real].tolist()
    return marked_text(tokenizer, prompt + response, [False] * len(prompt) + sampled)


def one_line(text: str) -> str:
    """``text`` on one line, each newline written ``\\n`` (a Markdown table row's cell)."""
    return text.replace("\n", "\\n")
