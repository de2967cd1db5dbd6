"""A toy engine that lives outside ``src/`` and ``conf/``: issue 47's "a new engine is its module
and its YAML" (``tests/engine/test_toy_engine.py`` writes the YAML and trains with it).

It keeps its own copy of the policy, as vLLM does (``samples_live_policy = False``): built from
the policy's weights at start, sampled with astrai's sampler, and loaded with the named tensors
the trainer hands over after each update. Each call is one line of ``calls`` (a knob of its own),
so a test can tell that the run really sampled and synced through it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from astrai.models.tokenizer import Tokenizer
from astrai.rollout.engines.engine import Engine, EngineJob, NamedTensors, named_tensors
from astrai.rollout.engines.sampler import Generation, SamplingConfig, generate


@dataclass
class ToyEngineConfig:
    """The toy's own knob."""

    calls: str = ""  # a file that gets one line per call: sample / sync (empty: none)


class ToyEngine(Engine):
    name = "toy"
    samples_live_policy = False  # its own copy, loaded by sync_weights
    supports_seeds = False
    supports_prefix_continuation = True
    Config = ToyEngineConfig

    def __init__(
        self, config: ToyEngineConfig, policy: nn.Module, tokenizer: Tokenizer, precision: str
    ) -> None:
        super().__init__(config, policy, tokenizer, precision)
        self.copy = copy.deepcopy(policy).eval().requires_grad_(False)
        self.calls = Path(config.calls) if config.calls else None

    @classmethod
    def check(cls, node: Mapping[str, Any], job: EngineJob) -> None:
        if job.device not in (None, "cpu"):
            raise ValueError(f"{job.engine(cls.name)} samples on the CPU only")

    def sample(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        group_size: int,
        sampling: SamplingConfig,
        stop_ids: Sequence[int],
        generator: torch.Generator | None = None,
    ) -> Generation:
        self._record(f"sample {prompt_ids.shape[0]}x{group_size}")
        return generate(
            self.copy,
            prompt_ids.repeat_interleave(group_size, 0),
            prompt_mask.repeat_interleave(group_size, 0),
            sampling,
            eos_id=stop_ids,
            pad_id=self.pad_id,
            generator=generator,
            precision=self.precision,
        )

    def sync_weights(self, weights: NamedTensors) -> float:
        start = time.perf_counter()
        # a tied lm_head is not among the named tensors: strict=False, the tie carries it
        missing, unexpected = self.copy.load_state_dict(dict(named_tensors(weights)), strict=False)
        assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
        self._record("sync")
        return time.perf_counter() - start

    def _record(self, line: str) -> None:
        if self.calls is not None:
            with self.calls.open("a") as out:
                out.write(line + "\n")
