"""An engine for episode tests that need a turn of a known start: the torch sampler, except that
each row's first turn begins with forced ids (``tests/e2e/test_smollm2_tools.py``: a real chat
model's tool call; ``tests/endpoint``: calls of a random tiny model)."""

from __future__ import annotations

import torch

from astrai.models.tokenizer import Tokenizer
from astrai.rollout.engines.engine import Engine, NoKnobs, TorchEngine
from astrai.rollout.engines.sampler import Generation, SamplingConfig


class ForcedFirstTurn(Engine):
    """The torch sampler, except that each row's first turn starts with ``forced[row]`` (ids
    appended to its prompt; the model samples the rest of the turn): a forced token is part
    of the turn as if sampled, with logprob 0."""

    name = "forced_first_turn"
    supports_prefix_continuation = True
    Config = NoKnobs

    def __init__(self, inner: TorchEngine, tokenizer: Tokenizer, forced: list[list[int]]) -> None:
        super().__init__(NoKnobs(), torch.nn.Module(), tokenizer)
        self.inner, self.forced, self.turns = inner, forced, 0

    def sample(self, prompt_ids, prompt_mask, group_size, sampling, stop_ids, generator=None):  # noqa: ANN001, ANN201
        self.turns += 1
        if self.turns > 1:
            inner = self.inner
            return inner.sample(prompt_ids, prompt_mask, group_size, sampling, stop_ids, generator)
        rows = [row[mask].tolist() + forced for row, mask, forced in
                zip(prompt_ids, prompt_mask, self.forced, strict=True)]  # fmt: skip
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, row in enumerate(rows):
            ids[i, width - len(row) :], mask[i, width - len(row) :] = torch.tensor(row), True
        most = max(len(forced) for forced in self.forced)
        rest = SamplingConfig(sampling.max_new_tokens - most, sampling.temperature)
        out = self.inner.sample(ids, mask, group_size, rest, stop_ids, generator)
        length = most + out.response_ids.shape[1]
        response = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
        kept = torch.zeros(len(rows), length, dtype=torch.bool)
        logprobs = torch.zeros(len(rows), length)
        for i, forced in enumerate(self.forced):
            sampled = out.response_ids[i][out.response_mask[i]]
            n = len(forced) + len(sampled)
            response[i, :n] = torch.tensor(forced + sampled.tolist(), dtype=torch.long)
            kept[i, :n] = True
            logprobs[i, len(forced) : n] = out.logprobs[i][out.response_mask[i]]
        return Generation(response, kept, logprobs)
