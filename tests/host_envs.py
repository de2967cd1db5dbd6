"""Environments for the environment-host tests (``tests/envs/test_hosts.py``,
``bench/env_boundary.py``): module-level classes, since a host's worker process imports them by
their module path. Each misbehaves in one way on demand."""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import threading
import time
from typing import Any

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn

# catastrophic backtracking in C, the GIL held throughout: each extra "a" doubles the time
# (28: about 12 s on this 2-core machine, 2026-12: still seconds on one several times faster)
BACKTRACKING = ("(a+)+$", "a" * 28 + "b")
HANG_S = 600.0  # "forever" for a test


def opening(row: dict[str, Any]) -> list[Message]:
    return [{"role": "user", "content": str(row.get("text", ""))}]


class Counter(Environment):
    """Counts its steps: each step's reward is the count so far; its metrics say which process
    and which instance answered."""

    def reset(self, row: dict[str, Any]) -> list[Message]:
        self.count = 0
        return opening(row)

    def step(self, turn: ParsedTurn) -> StepResult:
        self.count += 1
        metrics = {"pid": float(os.getpid()), "instance": float(id(self))}
        return StepResult(
            [{"role": "tool", "content": turn.content}], self.count, False, False, metrics
        )

    def final_reward(self) -> float:
        return 10.0 * self.count

    def tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "count"}}]


class Misbehaves(Environment):
    """``init`` (``hang``, ``raise``) misbehaves in the constructor; a row's ``fault`` in
    ``reset`` (``hang``, ``raise``, ``connection``); a turn's content in ``step``:
    ``backtrack`` (the GIL held for seconds), ``spin`` (a Python loop), ``hang`` (asleep),
    ``exit`` (``os._exit(3)``), ``segfault``, ``unpicklable`` (a result that cannot be sent
    back), ``sleep:<s>`` (asleep ``s`` seconds, then its start and end times as the reward
    and a metric), anything else: ``pid``."""

    def __init__(self, init: str = "") -> None:
        if init == "hang":
            time.sleep(HANG_S)
        if init == "raise":
            raise ValueError("a constructor that refuses")

    def reset(self, row: dict[str, Any]) -> list[Message]:
        fault = row.get("fault")
        if fault == "hang":
            time.sleep(HANG_S)
        if fault == "raise":
            raise KeyError("no such row")
        if fault == "connection":
            raise ConnectionError("the sandbox refused the connection")
        return opening(row)

    def step(self, turn: ParsedTurn) -> Any:
        what = turn.content
        if what == "backtrack":
            re.fullmatch(*BACKTRACKING)
        elif what == "spin":
            while True:
                pass
        elif what == "hang":
            time.sleep(HANG_S)
        elif what == "exit":
            os._exit(3)
        elif what == "segfault":
            ctypes.string_at(0)
        elif what == "unpicklable":
            return threading.Lock()
        elif what.startswith("sleep:"):
            began = time.time()
            time.sleep(float(what.split(":")[1]))
            return StepResult(reward=began, metrics={"ended": time.time()})
        return StepResult(metrics={"pid": float(os.getpid())})


class AsyncQueue(Environment):
    """An async environment with a client's shape: ``reset`` makes an ``asyncio.Lock``, an
    ``asyncio.Queue`` and a consumer task reading the queue; each ``step`` puts the turn on the
    queue under the lock and waits until the consumer has taken it. All of them belong to the
    loop ``reset`` ran on: a step on another loop fails or never ends."""

    async def reset(self, row: dict[str, Any]) -> list[Message]:  # type: ignore[override]
        self.lock = asyncio.Lock()
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.seen: list[str] = []
        self.consumer = asyncio.create_task(self._consume())
        return opening(row)

    async def _consume(self) -> None:
        while True:
            item = await self.queue.get()
            async with self.lock:  # contended with the step that put it
                self.seen.append(item)
            self.queue.task_done()

    async def step(self, turn: ParsedTurn) -> StepResult:  # type: ignore[override]
        async with self.lock:
            await self.queue.put(turn.content)
            await asyncio.sleep(0)  # the consumer now waits for the lock
        await self.queue.join()
        return StepResult([{"role": "tool", "content": ",".join(self.seen)}], len(self.seen))


class AsyncHangs(Environment):
    """An ``async def step`` that awaits forever, and tells (``cancelled``) whether it was
    cancelled."""

    cancelled: threading.Event = threading.Event()

    def reset(self, row: dict[str, Any]) -> list[Message]:
        return opening(row)

    async def step(self, turn: ParsedTurn) -> StepResult:  # type: ignore[override]
        try:
            await asyncio.sleep(HANG_S)
        except asyncio.CancelledError:
            AsyncHangs.cancelled.set()
            raise
        return StepResult()


def parse_upper(text: str) -> ParsedTurn:
    """A user's parser: the turn upper-cased, and the process that parsed it."""
    return ParsedTurn(content=f"{text.upper()}@{os.getpid()}")


def parse_backtracking(text: str) -> ParsedTurn:
    """A user's parser with a regex that backtracks catastrophically (the GIL held)."""
    re.fullmatch(*BACKTRACKING)
    return ParsedTurn(content=text)
