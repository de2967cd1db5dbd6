"""A toy collector that lives outside ``src/`` and ``conf/``: issue 60's "a third mode is a third
class" (``tests/rollout/test_toy_collector.py`` writes its YAML and trains with it).

It samples as the single-turn collector does, writes one line per call to ``calls`` (a key of its
own), and grades every held-out answer correct with reward 1: a run's ``eval/accuracy`` and
``eval/reward_mean`` then say that the evaluations went through it (a random policy scores
neither). Its banner line names it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from astrai.rollout.collectors import Answers, CollectorFacts, CollectorParts, SingleTurnCollector
from astrai.rollout.engines.engine import Engine
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.rollout import Rollout
from astrai.tasks.base import Problem


class RecordingCollector(SingleTurnCollector):
    def __init__(self, parts: CollectorParts, *, calls: str = "") -> None:
        super().__init__(parts)
        self.calls = calls  # a file that gets one line per call (empty: none)

    def note(self, line: str) -> None:
        if self.calls:
            with Path(self.calls).open("a") as out:
                out.write(line + "\n")

    def collect(
        self,
        problems: list[Problem],
        model: nn.Module,
        version: int,
        engine: Engine,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        self.note(f"collect {len(problems)}x{self.parts.group_size} v{version}")
        return super().collect(problems, model, version, engine, generator)

    def evaluate(
        self,
        engine: Engine,
        problems: list[Problem],
        greedy: SamplingConfig,
        batch_size: int,
        device: torch.device,
    ) -> Answers:
        self.note(f"evaluate {len(problems)}")
        answers = super().evaluate(engine, problems, greedy, batch_size, device)
        ones = [1.0] * len(problems)
        return Answers(answers.responses, answers.lengths, ones, [True] * len(problems))

    def facts(self) -> CollectorFacts:
        return CollectorFacts(line="collector: the toy, every held-out answer graded correct")
