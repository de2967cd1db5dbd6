"""An environment's answer fitted to ``env.max_observation_tokens`` (issue 50, part 2: the
observation tokens limited, the side cut configurable: ``env.observation_truncation_side``).

The answer's text is cut, never its tokens: its messages' contents lose characters from the
left (``left``: the end kept, as Hugging Face tokenizers' ``truncation_side="left"``) or from the
right (``right``: the start kept) until their rendering fits. So the template's own tokens (the
separator after the sampled end token, each message's header, the next turn's opening) are
always whole, and the ids stay a rendering of messages (the cut ones), which is what a full
re-render of the episode gives. Cutting the rendered ids instead would drop a template
answer's header (``<|im_start|>tool``): context the policy never sees at inference.

How many characters fit: a binary search, ~log2(characters) renders, only for an answer over
the limit. Where the template's own tokens alone exceed it, the answer keeps empty contents.
Where the most characters one token decodes to is known (``max_token_chars``), the text is first
cut to ``max_tokens × max_token_chars`` characters, which is exact (no longer text can fit) and
spares encoding a 100,000-character answer to learn that it does not (issue 58: such an answer
made a step ~7× slower).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from astrai.envs.base import Message

TRUNCATION_SIDES = ("left", "right")


def cut_contents(messages: Sequence[Message], keep: int, side: str) -> list[Message]:
    """``messages`` with ``keep`` characters of their contents (read as one text, in order)
    kept: the last ones for ``side="left"``, the first for ``"right"``; a message whose content
    is all cut stays, empty."""
    contents = [str(m.get("content", "")) for m in messages]
    left = keep
    kept = [""] * len(contents)
    order = range(len(contents) - 1, -1, -1) if side == "left" else range(len(contents))
    for i in order:
        text = contents[i]
        take = min(left, len(text))
        kept[i] = text[len(text) - take :] if side == "left" else text[:take]
        left -= take
    return [{**m, "content": text} for m, text in zip(messages, kept, strict=True)]


def fitted_observation(
    observation_ids: Callable[[Sequence[Message]], list[int]],
    messages: Sequence[Message],
    max_tokens: int,
    side: str,
    max_token_chars: int | None = None,
) -> list[int]:
    """The tokens of ``messages`` (``observation_ids``), their contents cut on ``side`` to the
    most characters whose rendering is at most ``max_tokens`` tokens (module docstring)."""
    if max_token_chars is not None:
        bound = max_tokens * max_token_chars
        if sum(len(str(m.get("content", ""))) for m in messages) > bound:
            messages = cut_contents(messages, bound, side)
    ids = observation_ids(messages)
    if len(ids) <= max_tokens:
        return ids
    low, high = 0, sum(len(str(m.get("content", ""))) for m in messages) - 1
    best = None  # the rendering of ``low`` characters, once one fitted
    while low < high:  # the most characters kept whose rendering fits lies in [low, high]
        middle = (low + high + 1) // 2
        candidate = observation_ids(cut_contents(messages, middle, side))
        if len(candidate) <= max_tokens:
            low, best = middle, candidate
        else:
            high = middle - 1
    return best if best is not None else observation_ids(cut_contents(messages, 0, side))
