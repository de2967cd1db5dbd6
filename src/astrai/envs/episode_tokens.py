"""An episode as tokens: the ids the policy saw and sampled, and which of them it is trained on
(issue 50, part 2). Token-in/token-out: sampled ids are kept as sampled, never re-tokenised
from text (verl's docs: re-tokenising made PPO "not even converge in single-turn").

- ``EpisodeTokens`` holds, per token, its id, whether it is trainable (exactly the sampled
  tokens, the sampled stop token included), its behaviour logprob, the policy version that
  sampled it and its turn. The prompt, the template's scaffolding, separators and
  observations are context: in the sequence, never trained on.
- ``ObservationRenderer`` turns the messages an environment answers with into the tokens that
  follow an assistant turn: rendered against a fixed two-message base, with the separator the
  template writes after an assistant's end token (ChatML's ``\\n`` after ``<|im_end|>``),
  which the engine never samples, put back in front (SkyRL PR #710, verl PR #6921: dropping
  it is a train/inference mismatch that compounds every turn).
- ``template_problem`` probes a chat template at start: where rendering a conversation is not
  a prefix of rendering it with more turns (Qwen3 drops an earlier assistant turn's reasoning;
  the last assistant turn gets an empty think block), the tokens a multi-turn episode holds
  are not what a full re-render gives, and the run is refused, naming the template.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from astrai.envs.base import Message

# chat turns -> text (``add_generation_prompt``): ``HFTokenizer.render_messages``
Render = Callable[[Sequence[Message], bool], str]
Encode = Callable[[str], list[int]]  # text -> ids, no special tokens added

# the base an observation is rendered against: a user turn, then an assistant turn
BASE_USER, BASE_ASSISTANT = "Hi.", "Hello."


@dataclass
class EpisodeTokens:
    """One episode's tokens, in order; every list has one entry per token."""

    ids: list[int] = field(default_factory=list)
    trainable: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # 0 where not sampled
    versions: list[int] = field(default_factory=list)  # -1 where not sampled
    turns: list[int] = field(default_factory=list)  # the turn a token belongs to (0: prompt)

    def add_context(self, ids: Sequence[int], turn: int) -> None:
        """Tokens the policy reads but did not sample (prompt, observations, separators)."""
        self._extend(ids, False, [0.0] * len(ids), -1, turn)

    def add_sampled(
        self, ids: Sequence[int], logprobs: Sequence[float], version: int, turn: int
    ) -> None:
        """Tokens the policy sampled in ``turn`` (its stop token included), with their
        behaviour logprobs, at policy ``version``: the trainable ones."""
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled ids but {len(logprobs)} logprobs")
        self._extend(ids, True, list(logprobs), version, turn)

    def _extend(
        self, ids: Sequence[int], trainable: bool, logprobs: list[float], version: int, turn: int
    ) -> None:
        self.ids += list(ids)
        self.trainable += [trainable] * len(ids)
        self.logprobs += logprobs
        self.versions += [version] * len(ids)
        self.turns += [turn] * len(ids)


def _base(observations: Sequence[Message] = ()) -> list[Message]:
    return [
        {"role": "user", "content": BASE_USER},
        {"role": "assistant", "content": BASE_ASSISTANT},
        *observations,
    ]


@dataclass(frozen=True)
class ObservationRenderer:
    """Observation tokens from messages, through a chat template (``render``) and a tokenizer
    (``encode``). ``end`` is the text of the assistant's end-of-turn token as the template
    writes it (``<|im_end|>``, ``<|eot_id|>``): what the engine samples last in a turn."""

    render: Render
    encode: Encode
    end: str

    def separator(self) -> str:
        """What the template writes after an assistant turn's end token, before the next
        message (``"\\n"`` in ChatML, ``""`` in Llama 3): never sampled, so it is context."""
        text = self.render(_base(), False)
        tail = text[text.rfind(BASE_ASSISTANT) + len(BASE_ASSISTANT) :]
        if not tail.startswith(self.end):
            raise ValueError(f"the template does not end an assistant turn with {self.end!r}")
        return tail[len(self.end) :]

    def text(self, observations: Sequence[Message]) -> str:
        """The text that follows a sampled end token: the separator, the observation messages,
        and the next assistant turn's opening (the generation prompt)."""
        before = self.render(_base(), False)
        after = self.render(_base(observations), True)
        if not after.startswith(before):
            raise ValueError("the chat template is not prefix-preserving (template_problem)")
        return self.separator() + after[len(before) :]

    def ids(self, observations: Sequence[Message]) -> list[int]:
        return self.encode(self.text(observations))


def template_problem(render: Render, end: str) -> str | None:
    """Why a multi-turn episode's tokens would not be what a full re-render of its messages
    gives with this template (one line), or None: a conversation rendered without the
    generation prompt must be a prefix of the same conversation with a tool reply and a user
    turn added, after an assistant turn ending in ``end``."""
    one = _base()
    more = _base([{"role": "tool", "content": "42"}, {"role": "user", "content": "And?"}])
    try:
        shorter, longer = render(one, False), render(more, True)
    except ValueError as err:
        return f"the chat template cannot render a multi-turn episode: {err}"
    if not longer.startswith(shorter):
        at = _first_difference(shorter, longer)
        return (
            "the chat template is not prefix-preserving: an earlier turn renders otherwise once "
            f"more turns follow (from character {at}: {shorter[at : at + 24]!r} becomes "
            f"{longer[at : at + 24]!r})"
        )
    if end not in shorter:
        return f"the chat template does not end an assistant turn with {end!r}"
    return None


def _first_difference(a: str, b: str) -> int:
    """The first index where ``a`` and ``b`` differ (the shorter's length if one is a prefix)."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
