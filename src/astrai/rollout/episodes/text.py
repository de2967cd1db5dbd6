"""How an episode's messages become the policy's tokens, per tokenizer (``episode_text``).

- A chat template (an HF tokenizer that has one): the opening messages rendered with the
  generation prompt (and the environment's tools, the template's ``tools=``); each answer's
  messages through ``envs.episode_tokens.ObservationRenderer`` (the separator after the
  assistant's end token put back). The template must be prefix-preserving
  (``template_problem``): a refusal names the template file.
- After a turn that did not sample the template's end token (cut at ``</tool_call>``, at
  ``max_new_tokens``, or ended by another stop id), the runner puts the end token in as
  context before the observation (``EpisodeText.end_ids``): the template closes every
  assistant turn with it, so the ids stay the template's rendering of the conversation.
- No template (the character tokenizer of the embedded tasks, or a base model): the messages'
  contents written one after the other, the opening with the tokenizer's BOS, an answer's
  contents straight after the sampled end token. Nothing else is rendered: the plain-text
  protocol the embedded environments speak.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from astrai.envs.base import Message
from astrai.envs.episode_tokens import ObservationRenderer, template_problem
from astrai.models.hf_tokenizer import HFTokenizer
from astrai.models.tokenizer import CharTokenizer, Tokenizer
from astrai.rollout.episodes.env_spec import EnvSpec, turn_parser
from astrai.rollout.episodes.runner import EpisodeText
from astrai.rollout.episodes.tool_prompt import opening_renderer


def _contents(messages: Sequence[Message]) -> str:
    return "".join(str(m.get("content", "")) for m in messages)


def _plain(tokenizer: Tokenizer, spec: EnvSpec) -> EpisodeText:
    if isinstance(tokenizer, CharTokenizer):
        opening = lambda messages: tokenizer.encode(_contents(messages), add_bos=True)  # noqa: E731
        answer = lambda messages: tokenizer.encode(_contents(messages), add_bos=False)  # noqa: E731
    else:
        assert isinstance(tokenizer, HFTokenizer)
        opening = lambda messages: tokenizer.encode(_contents(messages))  # noqa: E731
        answer = lambda messages: tokenizer.encode(_contents(messages), False)  # noqa: E731
    chars = 1 if isinstance(tokenizer, CharTokenizer) else tokenizer.longest_token_chars()
    return EpisodeText(
        opening,
        answer,
        tokenizer.decode,
        turn_parser(spec.parser),
        spec.stop_strings,
        user_parser=spec.user_parser,
        max_token_chars=chars,
    )


def end_of_turn_text(tokenizer: HFTokenizer) -> str:
    """The text of the stop token the template ends an assistant turn with (``<|im_end|>``,
    ``<|eot_id|>``): the one of the tokenizer's stop ids the rendered turn holds."""
    rendered = tokenizer.render_messages(
        [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}], False
    )
    for stop in tokenizer.stop_ids:
        text = tokenizer.token_text(stop)
        if text and text in rendered[rendered.rfind("Hello.") :]:
            return text
    where = tokenizer.template_file or "the chat template"
    raise ValueError(f"{where}: no stop token ends an assistant turn (multi-turn episodes)")


def episode_text(tokenizer: Tokenizer, spec: EnvSpec, tools: list[dict[str, Any]]) -> EpisodeText:
    """The ``EpisodeText`` of ``tokenizer`` for ``spec``'s environment offering ``tools``;
    ``ValueError`` (one line, naming the template) for a template that is not
    prefix-preserving."""
    if not isinstance(tokenizer, HFTokenizer) or tokenizer.chat_template is None:
        return _plain(tokenizer, spec)
    end = end_of_turn_text(tokenizer)
    problem = template_problem(tokenizer.render_messages, end)
    if problem is not None:
        raise ValueError(f"{tokenizer.template_file or 'the chat template'}: {problem}")
    renderer = ObservationRenderer(
        tokenizer.render_messages, lambda text: tokenizer.encode(text, False), end
    )

    # the tools shown to the policy: through the template, or written into the system message
    # where the template drops them (``rollout.episodes.tool_prompt``; refused here for a format
    # astrai cannot write)
    where = str(tokenizer.template_file or "the chat template")
    opening_text = opening_renderer(tokenizer.render_messages, tools, spec.parser, where)

    def opening(messages: Sequence[Message]) -> list[int]:
        return tokenizer.encode(opening_text(messages), False)

    return EpisodeText(
        opening,
        renderer.ids,
        tokenizer.decode,
        turn_parser(spec.parser),
        spec.stop_strings,
        end_ids=tuple(tokenizer.encode(end, False)),
        user_parser=spec.user_parser,
        max_token_chars=tokenizer.longest_token_chars(),
        template=hashlib.sha256(str(tokenizer.chat_template).encode()).hexdigest()[:16],
    )
