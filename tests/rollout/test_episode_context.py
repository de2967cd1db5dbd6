"""The episode runner's tokens are the chat template's rendering of the same conversation at
every turn (issue 58, finding 1), also after a turn that did not sample the template's end
token: a Hermes call cut at ``</tool_call>``, a turn cut at ``max_new_tokens``, and Llama 3.1's
``<|eom_id|>``. Before the fix the observation followed such a turn directly
(``…</tool_call>\\n<|im_start|>tool`` where the template writes
``…</tool_call><|im_end|>\\n<|im_start|>tool``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.chat_families import CHATML, write_family_tokenizer
from tests.scripted_engine import ScriptedIds

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn
from astrai.models.hf_tokenizer import HFTokenizer
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.episodes.env_spec import env_spec
from astrai.rollout.episodes.runner import EpisodeLimits, run_episodes
from astrai.rollout.episodes.text import episode_text

SAMPLING = SamplingConfig(max_new_tokens=64, temperature=1.0)
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"word": "kiwi"}}\n</tool_call>'


class Lookup(Environment):
    """Answers a call with the code, anything else with "again?"; the third turn ends it."""

    def reset(self, row: dict) -> list[Message]:
        self.turns = 0
        return [{"role": "user", "content": row["text"]}]

    def step(self, turn: ParsedTurn) -> StepResult:
        self.turns += 1
        if self.turns == 3:
            return StepResult(reward=1.0, done=True)
        if turn.calls:
            return StepResult([{"role": "tool", "content": "47"}])
        return StepResult([{"role": "user", "content": "again?"}])


def _tokenizer(tmp_path: Path, family: str) -> HFTokenizer:
    directory = write_family_tokenizer(tmp_path / family, "qwen3" if family == "chatml" else family)
    if family == "chatml":  # SmolLM2-135M-Instruct's template on a ChatML vocabulary
        config = json.loads((directory / "tokenizer_config.json").read_text())
        config["chat_template"] = CHATML
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return HFTokenizer.load(directory)


def _raw(tokenizer: HFTokenizer, ids: list[int]) -> str:
    """The text of ``ids`` with special tokens kept (what the assistant's message holds)."""
    return str(tokenizer._tokenizer.decode(ids, skip_special_tokens=False))  # noqa: SLF001


# family, parser, the end token, and each turn's sampled text: the first a call the runner cuts
# after its stop string (chatml) or ended by <|eom_id|> (llama3_1), the second cut at
# max_new_tokens (no stop id), the third ended by the end token
CASES = {
    "chatml-hermes": ("chatml", "hermes", "<|im_end|>", [CALL + "ignored", "I am still", "47"]),
    "llama3_1-eom": (
        "llama3_1",
        "llama3_json",
        "<|eot_id|>",
        [
            '<|python_tag|>{"name": "lookup", "parameters": {"word": "kiwi"}}<|eom_id|>',
            "I am",
            "47",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_turn_s_prompt_is_the_template_s_rendering(tmp_path: Path, case: str) -> None:
    family, parser, end, texts = CASES[case]
    tokenizer = _tokenizer(tmp_path, family)
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    spec = env_spec({"_target_": f"{__name__}.Lookup", "parser": parser, "workers": "thread"})
    assert spec is not None
    text = episode_text(tokenizer, spec, [])
    script = [[encode(texts[0])], [encode(texts[1])], [encode(texts[2] + end)]]
    engine = ScriptedIds(tokenizer, [list(turn) for turn in script])
    row = {"text": "code of kiwi?"}
    limits = EpisodeLimits(max_turns=3, max_episode_tokens=4096, max_observation_tokens=512)
    (episode,) = run_episodes(engine, [Lookup()], [row], text, SAMPLING, tokenizer.stop_ids, limits)
    assert episode.done and not episode.failed and episode.turn_rewards == [0.0, 0.0, 1.0]
    assert episode.tool_calls == 1
    render = lambda m: encode(tokenizer.render_messages(m, add_generation_prompt=True))  # noqa: E731
    messages: list[Message] = [{"role": "user", "content": row["text"]}]
    assert engine.prompts[0] == [render(messages)]
    kept_first = CALL if family == "chatml" else texts[0]  # the sampled text after the cut
    replies = [[{"role": "tool", "content": "47"}], [{"role": "user", "content": "again?"}]]
    for turn, (said, reply) in enumerate(zip([kept_first, texts[1]], replies, strict=True)):
        messages += [{"role": "assistant", "content": said}, *reply]
        assert engine.prompts[turn + 1] == [render(messages)], (case, turn)
    # the end token after the cut turns is context, never trained on; what was sampled is
    trained = [i for i, t in zip(episode.tokens.ids, episode.tokens.trainable, strict=True) if t]
    assert trained == encode(kept_first) + encode(texts[1]) + encode(texts[2] + end)
    assert _raw(tokenizer, trained).count(end) == 1


def test_a_turn_that_sampled_the_end_token_gets_no_second_one(tmp_path: Path) -> None:
    tokenizer = _tokenizer(tmp_path, "chatml")
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    spec = env_spec({"_target_": f"{__name__}.Lookup", "parser": "none", "workers": "thread"})
    assert spec is not None
    text = episode_text(tokenizer, spec, [])
    script = [[encode("a<|im_end|>")], [encode("b<|im_end|>")], [encode("c<|im_end|>")]]
    engine = ScriptedIds(tokenizer, script)
    limits = EpisodeLimits(max_turns=3, max_episode_tokens=4096)
    (episode,) = run_episodes(
        engine, [Lookup()], [{"text": "hi"}], text, SAMPLING, tokenizer.stop_ids, limits
    )
    assert _raw(tokenizer, episode.tokens.ids).count("<|im_end|>\n<|im_start|>user") == 3
    assert "<|im_end|><|im_end|>" not in _raw(tokenizer, episode.tokens.ids)
