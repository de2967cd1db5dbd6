"""``trainer.max_duration`` bounds a step (issue 30, item 3): when the budget runs out inside
``interruptible()`` (a one-process run's sampling, scoring and evaluations) the work is
abandoned at once, also a blocking sleep or a timed join; elsewhere the run stops at the step's
end. Documented bound: the rest of the step's update + one checkpoint write + ~1 s."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest
from tests.helpers import compose_config

from astrai.rewards.base import Reward, RewardTerm
from astrai.training.stopping import (
    BUDGET_SIGNAL,
    StopInterrupt,
    StopRequest,
    interruptible,
)

BUDGET_S = 0.1
SLACK_S = 1.0  # the documented "~1 s", generous on a busy machine


def _sleep_forever(prompts: list[str], responses: list[str], answers: list) -> list[float]:
    time.sleep(60)  # a blocking C call: only a real signal wakes it
    return [0.0] * len(responses)


def test_the_budget_abandons_a_blocking_sleep_inside_interruptible() -> None:
    start = time.monotonic()
    with StopRequest(max_duration_s=BUDGET_S) as stop:
        with pytest.raises(StopInterrupt) as caught, interruptible():
            time.sleep(5)
        assert caught.value.signal_name == "max_duration"
        assert stop.reason == "max_duration"
    assert time.monotonic() - start < BUDGET_S + SLACK_S


def test_the_budget_abandons_a_reward_waited_for_with_a_timeout() -> None:
    """``reward.timeout_s`` runs the call in a thread; the main thread's timed join wakes for
    the budget too, long before the reward's own timeout."""
    reward = Reward([RewardTerm("hang", 1.0, _sleep_forever)], 1.0, timeout_s=30)
    start = time.monotonic()
    with StopRequest(max_duration_s=BUDGET_S), interruptible():
        with pytest.raises(StopInterrupt, match="max_duration"):
            reward.score(["a"], ["b"], [None])
    assert time.monotonic() - start < BUDGET_S + SLACK_S


def test_outside_interruptible_the_budget_waits_for_the_step_end() -> None:
    """The update is not abandoned: nothing is raised there; the reason says the budget is
    spent, and later interruptible work (an evaluation due at that step) is abandoned on
    entry."""
    with StopRequest(max_duration_s=BUDGET_S) as stop:
        time.sleep(BUDGET_S + 0.1)  # "the update": no StopInterrupt
        assert stop.reason == "max_duration"
        entered = False
        with pytest.raises(StopInterrupt, match="max_duration"), interruptible():
            entered = True
        assert not entered
        with interruptible(enabled=False):  # a multi-process run's: never abandoned
            entered = True
        assert entered


def test_handlers_and_watchdog_are_gone_after_the_request() -> None:
    # a known handler before (an earlier in-process run of this worker may have left its own)
    signal.signal(BUDGET_SIGNAL, signal.SIG_DFL)
    previous = signal.getsignal(BUDGET_SIGNAL)
    with StopRequest(max_duration_s=3600) as stop:
        assert stop.reason is None
        assert signal.getsignal(BUDGET_SIGNAL) is not previous
    assert signal.getsignal(BUDGET_SIGNAL) is previous
    assert not [t for t in threading.enumerate() if t.name == "astrai-time-budget"]
    with StopRequest(max_duration_s=None):  # no budget: no watchdog, no handler
        assert signal.getsignal(BUDGET_SIGNAL) is previous
        assert not [t for t in threading.enumerate() if t.name == "astrai-time-budget"]


class HangAfter:
    """A reward that scores 0.0 for its first ``calls`` calls, then sleeps for a minute."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def __call__(self, prompts: list[str], responses: list[str], answers: list) -> list[float]:
        self.calls -= 1
        if self.calls < 0:
            time.sleep(60)
        return [0.0] * len(responses)


@pytest.mark.slow  # ~3 s: a tiny run in-process, 2 s of it the budget
def test_a_trainer_with_a_hung_reward_stops_at_the_budget_with_its_last_step_saved(
    tmp_path: Path,
) -> None:
    from astrai.training.run import Run

    cfg = compose_config(
        [
            "debug=quick",
            "trainer.total_steps=5",
            "trainer.eval_every=100",
            "trainer.max_duration=2s",
            "ckpt.every_steps=0",
            f"reward._target_={__name__}.HangAfter",
            "+reward.calls=2",  # the step-0 evaluation, step 1's rollout; step 2's hangs
        ]
    )
    trainer = Run(cfg, tmp_path)
    start = time.monotonic()
    summary = trainer.fit()
    elapsed = time.monotonic() - start
    assert summary["stopped"] == "max_duration" and summary["step"] == 1
    assert elapsed < 2 + SLACK_S + 2  # + one checkpoint write, generously
    assert summary["checkpoint"] == str(tmp_path / "checkpoints" / "step_1")
    state = json.loads((tmp_path / "checkpoints" / "step_1" / "trainer_state.json").read_text())
    assert state["step"] == 1
