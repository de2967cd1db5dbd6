"""Environments for the trainer's episode tests (``env=custom env._target_=tests.episode_envs.X``):
two turns on any task row, rewards that vary within a group by construction (the parity of a
hash of the sampled text, not a random model happening to earn something), and faults on
demand."""

from __future__ import annotations

import hashlib
import threading

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn
from astrai.paths import REPO_ROOT

TARGET = "tests.episode_envs.TwoTurns"
# examples/tool_env's environment on its task file (tests/e2e/test_user_env.py, the vLLM lane's
# tests/engine/test_vllm_episodes.py; its module importable from EXAMPLE)
EXAMPLE = REPO_ROOT / "examples" / "tool_env"
LOOKUP_ENV = [
    "task=dataset",
    f"task.train_path={EXAMPLE / 'tasks.jsonl'}",
    "task.eval_fraction=0.25",
    "env=custom",
    "env._target_=lookup_env.Lookup",
    "env.parser=lookup_env.parse_lookup",
]
TWO_TURNS = ["env=custom", f"env._target_={TARGET}", "env.parser=none", "env.max_turns=3"]


def _parity(text: str) -> float:
    return float(hashlib.sha256(text.encode()).digest()[0] % 2)


class TwoTurns(Environment):
    """Opens with the row's prompt; answers the first turn ``=1`` (reward 0.25 × the parity
    of its text), ends at the second (reward the parity of its text)."""

    def reset(self, row: dict) -> list[Message]:
        self.turns = 0
        return [{"role": "user", "content": row["text"]}]

    def step(self, turn: ParsedTurn) -> StepResult:
        self.turns += 1
        if self.turns == 1:
            return StepResult(
                [{"role": "tool", "content": "=1"}], reward=0.25 * _parity(turn.content)
            )
        return StepResult(reward=_parity(turn.content), done=True, metrics={"parity": 1.0})


class Faulty(TwoTurns):
    """Like ``TwoTurns``, but the first step of a row whose text starts with 1 hangs, with 2
    raises, with 3 answers with 1 MB of text (an addition row: ``"1+5="``)."""

    def reset(self, row: dict) -> list[Message]:
        self.row_text = row["text"]
        return super().reset(row)

    def step(self, turn: ParsedTurn) -> StepResult:
        if self.turns == 0 and self.row_text[0] in "123":
            if self.row_text[0] == "1":
                threading.Event().wait(60)
            if self.row_text[0] == "2":
                raise RuntimeError("the tool crashed")
            return StepResult([{"role": "tool", "content": "9" * 1_000_000}])
        return super().step(turn)


class RandomOpening(TwoTurns):
    """Opens with a fresh random number in the prompt: not the same for the same row."""

    def reset(self, row: dict) -> list[Message]:
        import random

        super().reset(row)
        return [{"role": "user", "content": f"{row['text']} (seed {random.random()})"}]


class AsyncTwoTurns(TwoTurns):
    """``TwoTurns`` with ``async def`` reset and step that share an ``asyncio.Lock`` made in
    ``reset`` (a client kept across steps): it needs one event loop for the whole episode."""

    async def reset(self, row: dict) -> list[Message]:  # type: ignore[override]
        import asyncio

        self.lock = asyncio.Lock()
        async with self.lock:
            return TwoTurns.reset(self, row)

    async def step(self, turn: ParsedTurn) -> StepResult:  # type: ignore[override]
        async with self.lock:
            return TwoTurns.step(self, turn)


class ResetHangs(TwoTurns):
    def reset(self, row: dict) -> list[Message]:
        threading.Event().wait(60)
        raise AssertionError


class ResetConnectionError(TwoTurns):
    def reset(self, row: dict) -> list[Message]:
        raise ConnectionError("the sandbox is down")


class NoStep(Environment):
    """Opens an episode but has no ``step``: ``Environment`` is abstract, so it cannot be built."""

    def reset(self, row: dict) -> list[Message]:
        return [{"role": "user", "content": "?"}]


class StepReturnsNone(TwoTurns):
    """Every step returns ``None`` (a forgotten ``return``): every episode fails."""

    def step(self, turn: ParsedTurn) -> StepResult:
        return None  # type: ignore[return-value]


class Product(Environment):
    """Asks for a product; says "no" until the answer is right (reward 1), (the runner's tests:
    tests/rollout/test_episodes.py, test_episode_faults.py)."""

    def reset(self, row: dict) -> list[Message]:
        self.answer = str(row["a"] * row["b"])
        return [{"role": "user", "content": f"{row['a']}*{row['b']}=?"}]

    def step(self, turn: ParsedTurn) -> StepResult:
        if turn.content == self.answer:
            return StepResult(reward=1.0, done=True)
        return StepResult([{"role": "tool", "content": "no"}])
