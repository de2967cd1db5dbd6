"""A scripted engine and a plain-text episode rendering for the episode runner's tests
(``tests/rollout/test_episodes.py``, ``tests/envs/test_calculator.py``): the engine answers each
call with the next texts of its script and records the prompts it was given."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from astrai.envs.base import Message
from astrai.envs.tool_calls import ParsedTurn
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.engines.engine import Engine, NoKnobs
from astrai.rollout.engines.sampler import Generation, SamplingConfig
from astrai.rollout.episodes.runner import EpisodeText

TOKENIZER = CharTokenizer()
GREEDY = SamplingConfig(max_new_tokens=6, temperature=0.0)


def _lines(messages: Sequence[Message]) -> str:
    return "".join(f"{m['role'][0]}:{m['content']}," for m in messages)


TEXT = EpisodeText(
    prompt_ids=lambda messages: TOKENIZER.encode(_lines(messages) + "a:"),
    observation_ids=lambda messages: TOKENIZER.encode(_lines(messages) + "a:", add_bos=False),
    decode=TOKENIZER.decode,
    parse=lambda text: ParsedTurn(content=text),
)


class Scripted(Engine):
    """Answers each call with the next texts of its script (one per live row), ending each
    with the stop id; records the prompts it was given."""

    name = "scripted"
    supports_prefix_continuation = True
    Config = NoKnobs

    def __init__(self, script: list[list[str]]) -> None:
        super().__init__(NoKnobs(), torch.nn.Module(), TOKENIZER)
        self.script, self.prompts = script, []

    def sample(self, prompt_ids, prompt_mask, group_size, sampling, stop_ids, generator=None):  # noqa: ANN001, ANN201
        self.prompts.append(
            [row[mask].tolist() for row, mask in zip(prompt_ids, prompt_mask, strict=False)]
        )
        texts = self.script.pop(0)
        rows = [TOKENIZER.encode(t, add_bos=False) + [TOKENIZER.eos_id] for t in texts]
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), True
        return Generation(ids, mask, torch.where(mask, -0.5, 0.0))


class ScriptedIds(Engine):
    """Answers each call with the next id rows of its script (one per live row, taken as
    given: a stop id only where the row holds one, as an engine cut at ``max_new_tokens``
    would); records the prompts it was given. For tokenizers other than the character one."""

    name = "scripted_ids"
    supports_prefix_continuation = True
    Config = NoKnobs

    def __init__(self, tokenizer: object, script: list[list[list[int]]]) -> None:
        super().__init__(NoKnobs(), torch.nn.Module(), tokenizer)  # type: ignore[arg-type]
        self.script, self.prompts = script, []

    def sample(self, prompt_ids, prompt_mask, group_size, sampling, stop_ids, generator=None):  # noqa: ANN001, ANN201
        self.prompts.append(
            [row[mask].tolist() for row, mask in zip(prompt_ids, prompt_mask, strict=False)]
        )
        rows = self.script.pop(0)
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r, dtype=torch.long), True
        return Generation(ids, mask, torch.where(mask, -0.5, 0.0))
