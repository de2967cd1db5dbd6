"""``rollout.episodes.observation_limit``: an environment's answer over ``max_observation_tokens``
loses characters of its text on the configured side, never the template's own tokens (issue 50,
part 2: observation tokens truncated, the side configurable)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from tests.chat_families import write_family_tokenizer

from astrai.envs.episode_tokens import ObservationRenderer
from astrai.models.hf_tokenizer import HFTokenizer
from astrai.rollout.episodes.observation_limit import cut_contents, fitted_observation

HEADER, TRAILER = 1, 2  # a stand-in template: each message is [1, *chars, 2]


def _ids(messages: Sequence[dict]) -> list[int]:
    out = []
    for message in messages:
        out += [HEADER, *(ord(c) for c in message["content"]), TRAILER]
    return out


ANSWER = [{"role": "tool", "content": "abcdef"}, {"role": "user", "content": "XYZ"}]


def test_the_contents_lose_characters_on_their_side_across_messages() -> None:
    assert [m["content"] for m in cut_contents(ANSWER, 4, "left")] == ["f", "XYZ"]
    assert [m["content"] for m in cut_contents(ANSWER, 4, "right")] == ["abcd", ""]
    assert [m["role"] for m in cut_contents(ANSWER, 0, "left")] == ["tool", "user"]
    assert cut_contents(ANSWER, 9, "right") == ANSWER


@pytest.mark.parametrize(("side", "kept"), [("left", ["f", "XYZ"]), ("right", ["abcd", ""])])
def test_an_answer_over_the_limit_keeps_its_scaffold_and_the_most_text_that_fits(
    side: str, kept: list[str]
) -> None:
    # 4 scaffold tokens + 4 characters = 8 tokens
    fitted = fitted_observation(_ids, ANSWER, 8, side)
    assert fitted == _ids([{"content": text} for text in kept])
    assert fitted_observation(_ids, ANSWER, 13, side) == _ids(ANSWER)  # fits: untouched
    # the scaffold alone is over the limit: every content empty, the scaffold whole
    assert fitted_observation(_ids, ANSWER, 3, side) == [HEADER, TRAILER, HEADER, TRAILER]


def test_a_chat_template_answer_keeps_its_header_and_the_next_turns_opening(
    tmp_path: Path,
) -> None:
    """Llama 3's template: the fitted ids are the rendering of the cut answer, open with the
    separator and the tool message's header and end with the next assistant turn's opening,
    and one more character would not fit."""
    tokenizer = HFTokenizer.load(write_family_tokenizer(tmp_path / "llama3", "llama3"))

    def render(messages, generation):  # noqa: ANN001, ANN202
        return tokenizer.render_messages(messages, add_generation_prompt=generation)

    renderer = ObservationRenderer(render, lambda t: tokenizer.encode(t, False), "<|eot_id|>")
    head, tail = renderer.text([{"role": "tool", "content": "§"}]).split("§")
    assert "<|start_header_id|>" in head and tail.endswith("assistant<|end_header_id|>\n\n")
    answer = [{"role": "tool", "content": "result: " + "0123456789" * 20}]
    source = answer[0]["content"]
    limit = len(renderer.ids(answer)) - 150
    for side in ("left", "right"):
        fitted = fitted_observation(renderer.ids, answer, limit, side)
        assert len(fitted) <= limit
        before, after = tokenizer.encode(head, False), tokenizer.encode(tail, False)
        assert fitted[: len(before)] == before and fitted[len(fitted) - len(after) :] == after
        content = tokenizer.decode(fitted[len(before) : len(fitted) - len(after)])
        assert 0 < len(content) < len(source)
        assert content == (source[-len(content) :] if side == "left" else source[: len(content)])
        assert fitted == renderer.ids(cut_contents(answer, len(content), side))
        assert len(renderer.ids(cut_contents(answer, len(content) + 1, side))) > limit
    assert answer[0]["content"] == source  # the answer itself is not changed in place
