"""``envs.tool_limits.run_limited``: a tool that hangs, raises or floods is an outcome, not a
crash or a hang of the caller (issue 50, part 5)."""

from __future__ import annotations

import threading
import time

from astrai.envs.base import Environment, StepResult
from astrai.envs.tool_calls import ParsedTurn
from astrai.envs.tool_limits import (
    Limited,
    StepsAbandoned,
    abandon_steps_of,
    run_all_limited,
    run_limited,
)


def test_a_result_comes_back_as_it_is() -> None:
    assert run_limited(lambda a, b: a * b, 12, 34, timeout_s=5) == Limited(value=408)


def test_a_hung_call_is_a_timeout_and_the_caller_goes_on() -> None:
    release = threading.Event()
    start = time.perf_counter()
    out = run_limited(release.wait, 60, timeout_s=0.2)  # would block a minute
    assert out.timed_out and out.error == "timed out after 0.2 s" and out.value is None
    assert time.perf_counter() - start < 5
    release.set()  # let the abandoned thread end


def test_an_exception_is_one_line() -> None:
    def broken() -> None:
        raise ValueError("bad input\nwith a second line")

    out = run_limited(broken, timeout_s=5)
    assert out == Limited(error="ValueError: bad input")


def test_a_flood_is_cut_to_max_chars() -> None:
    out = run_limited(lambda: "x" * 1_000_000, timeout_s=5, max_chars=100)
    assert out.cut and out.value == "x" * 100
    assert run_limited(lambda: [1, 2], timeout_s=5, max_chars=100) == Limited(value=[1, 2])


def test_an_environment_answers_turns_with_step_results() -> None:
    class Guess(Environment):
        def reset(self, row: dict) -> list[dict]:
            self.target = row["target"]
            return [{"role": "user", "content": "Guess my number."}]

        def step(self, turn: ParsedTurn) -> StepResult:
            guess = int(turn.content)
            if guess == self.target:
                return StepResult(reward=1.0, done=True)
            hint = "higher" if guess < self.target else "lower"
            return StepResult([{"role": "user", "content": hint}])

    env = Guess()
    assert env.reset({"target": 7}) == [{"role": "user", "content": "Guess my number."}]
    assert env.step(ParsedTurn("3")).observations == [{"role": "user", "content": "higher"}]
    last = env.step(ParsedTurn("7"))
    assert last.done and last.reward == 1.0 and not last.truncated
    assert env.final_reward() == 0.0 and env.tools() == []


def test_calls_run_at_most_max_concurrency_at_once() -> None:
    def meet(barrier: threading.Barrier) -> str:
        barrier.wait()  # returns only once every party arrived
        return "met"

    three = threading.Barrier(3, timeout=5)
    together = run_all_limited([(meet, (three,), 10.0)] * 3, max_concurrency=3)
    assert [r.value for r in together] == ["met"] * 3
    # two at a time: the first two never meet a third party (the barrier breaks: an error each)
    apart = threading.Barrier(3, timeout=0.3)
    waves = run_all_limited([(meet, (apart,), 10.0)] * 3, max_concurrency=2)
    assert all(r.error is not None and "BrokenBarrierError" in r.error for r in waves)


def test_an_abandoned_thread_stops_waiting_for_its_steps_and_others_go_on() -> None:
    """``abandon_steps_of``: what a stop does to the sampling thread of an overlapped run. Its
    wait on a hung step raises ``StepsAbandoned`` (long before the step's own 60 s limit), and
    so does its next call, before starting any step; another thread's calls are untouched."""
    release = threading.Event()
    waiting, outcomes = threading.Event(), []

    def sampler() -> None:
        waiting.set()
        for _ in range(2):
            try:
                run_all_limited([(release.wait, (60,), 60.0)], max_concurrency=1)
                outcomes.append("returned")
            except StepsAbandoned:
                outcomes.append("abandoned")

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    waiting.wait(5)
    time.sleep(0.3)  # inside its wait on the hung step
    abandon_steps_of(thread)
    thread.join(5)
    assert not thread.is_alive() and outcomes == ["abandoned", "abandoned"]
    assert run_all_limited([(lambda: 7, (), 5.0)], max_concurrency=1) == [Limited(value=7)]
    release.set()
