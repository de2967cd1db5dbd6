"""The reward worker (``astrai.rewards.worker``, issue 45): config-built terms run in a killable
process; a call past ``reward.timeout_s`` costs the rows that do not return (scored
``reward.timeout_score``, counted), not the run; waits are interruptible and abandonable."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest
from tests.helpers import compose_config

from astrai.config.errors import ConfigError
from astrai.rewards.base import Reward, RewardConfigError, RewardError, RewardTerm
from astrai.rewards.build import build_reward
from astrai.rewards.builtin import partial_credit
from astrai.rewards.worker import RewardCallAbandoned, abandon_reward_calls

HELPERS = "tests.rewards.hanging_rewards"


def _reward(*targets: str, **run: Any) -> Reward:
    """A reward of ``targets`` (each weight 1, named after its function) built from config."""
    terms = [{"_target_": t if "." in t else f"{HELPERS}.{t}", "weight": 1.0} for t in targets]
    return build_reward({"accuracy_threshold": 1.0, "terms": terms, **run})


def _gone(pid: int, within_s: float = 2.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_worker_scores_equal_inline_scores() -> None:
    prompts, responses = ["1+2=", "5+5=", "5+5="], ["3", "13", "10"]
    answers: list[str | None] = ["3", "10", "10"]
    worker = _reward("astrai.rewards.builtin.partial_credit")
    inline = Reward([RewardTerm("partial_credit", 1.0, partial_credit)], 1.0)
    assert worker.terms[0].remote is not None and inline.terms[0].remote is None
    try:
        scored = worker.score(prompts, responses, answers)
        assert scored == inline.score(prompts, responses, answers)
        assert scored[0] == [1.0, 0.5, 1.0]
    finally:
        worker.close()


def test_terms_run_in_a_worker_and_inline_ones_here() -> None:
    reward = _reward("worker_pid", "InlinePid")
    try:
        _, per_term = reward.score(["p"], ["r"], [None])
        assert per_term["inline_pid"] == [float(os.getpid())]
        assert per_term["worker_pid"][0] not in (0.0, float(os.getpid()))
    finally:
        reward.close()


@pytest.mark.parametrize("target", ["sleeps_on_hang", "backtracks_on_hang"])
def test_a_row_that_does_not_return_scores_timeout_score_and_is_counted(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    reward = _reward(target, "worker_pid", timeout_s=0.5, timeout_score=-1.0)
    try:
        pid_before = reward.score(["p"], ["r"], [None])[1]["worker_pid"][0]
        start = time.monotonic()
        _, per_term = reward.score(["p0", "p1", "p2"], ["ok", "hang", "four"], [None] * 3)
        took = time.monotonic() - start
        assert per_term[target] == [2.0, -1.0, 4.0]  # len(response), the hung row's timeout_score
        assert reward.take_timeouts() == 1 and reward.take_timeouts() == 0
        assert took < 2.5  # the batch's 0.5 s, then the hung row's 0.5 s, and worker starts
        assert "reward " + target + " did not return on prompt 'p1'" in caplog.text
        assert "reward.timeout_s=0.5s" in caplog.text
        # the hung worker was killed and replaced: the next call works, in another process
        pid_after = per_term["worker_pid"][0]
        assert pid_after != pid_before and _gone(int(pid_before))
        assert reward.score(["p"], ["abc"], [None])[1][target] == [3.0]
    finally:
        reward.close()


def test_a_batch_of_one_that_does_not_return_is_not_called_again() -> None:
    reward = _reward("sleeps_on_hang", timeout_s=0.3)
    try:
        start = time.monotonic()
        assert reward.score(["p"], ["hang"], [None])[0] == [0.0]
        assert time.monotonic() - start < 1.5 and reward.take_timeouts() == 1
    finally:
        reward.close()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("fails_on_bad", r"^reward fails_on_bad failed on prompt 'p1': by zero$"),
        ("exits_on_bad", r"^reward exits_on_bad called sys\.exit\(3\) on prompt 'p1'$"),
    ],
)
def test_errors_in_the_worker_keep_their_one_line(target: str, message: str) -> None:
    reward = _reward(target)
    try:
        with pytest.raises(RewardError, match=message):
            reward.score(["p0", "p1", "p2"], ["ok", "bad", "ok"], [None] * 3)
    finally:
        reward.close()


def test_a_failing_call_is_diagnosed_within_one_more_timeout() -> None:
    """The row-by-row search for the failing prompt gets one timeout in all, not per row."""
    reward = _reward("fails_then_hangs", timeout_s=0.3)
    start = time.monotonic()
    try:
        with pytest.raises(RewardError, match=r"^reward fails_then_hangs failed on prompt 'p0'"):
            reward.score(["p0", "p1", "p2"], ["a", "b", "c"], [None] * 3)
        assert time.monotonic() - start < 1.5
    finally:
        reward.close()


def test_abandon_unblocks_a_caller_in_another_thread_at_once() -> None:
    reward = _reward("sleeps_on_hang")  # timeout_s absent: no bound
    outcome: list[BaseException] = []

    def score() -> None:
        try:
            reward.score(["p"], ["hang"], [None])
        except BaseException as err:  # noqa: BLE001 (what the thread raised)
            outcome.append(err)

    thread = threading.Thread(target=score)
    thread.start()
    time.sleep(0.5)  # the worker started and sleeps in the call
    assert not outcome
    start = time.monotonic()
    abandon_reward_calls()
    thread.join(2.0)
    assert not thread.is_alive() and time.monotonic() - start < 1.0
    assert len(outcome) == 1 and isinstance(outcome[0], RewardCallAbandoned)
    assert not isinstance(outcome[0], Exception)  # a user's except Exception cannot swallow it
    reward.close()


class _Stop(BaseException):
    pass


def test_a_signal_while_waiting_raises_and_kills_the_worker() -> None:
    reward = _reward("sleeps_on_hang", "worker_pid")
    pid = int(reward.score(["p"], ["r"], [None])[1]["worker_pid"][0])

    def handler(signum: int, frame: object) -> None:
        raise _Stop

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    start = time.monotonic()
    try:
        with pytest.raises(_Stop):
            reward.score(["p"], ["hang"], [None])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - start < 1.0
    assert _gone(pid)  # no orphan: the worker that slept was killed
    assert reward.score(["p"], ["abc"], [None])[1]["sleeps_on_hang"] == [3.0]  # a fresh one
    reward.close()


def test_close_kills_the_workers() -> None:
    reward = _reward("worker_pid")
    pid = int(reward.score(["p"], ["r"], [None])[0][0])
    reward.close()
    assert _gone(pid)


@pytest.mark.parametrize("value", [True, "0", float("nan"), float("inf")])
def test_the_timeout_score_is_a_finite_number(value: object) -> None:
    node = {"_target_": "astrai.rewards.builtin.exact_match", "accuracy_threshold": 1.0}
    with pytest.raises(RewardConfigError, match=r"reward\.timeout_score must be a finite number"):
        build_reward({**node, "timeout_score": value})
    assert build_reward({**node, "timeout_score": -2}).timeout_score == -2.0
    term = {"_target_": "astrai.rewards.builtin.exact_match", "weight": 1.0, "timeout_score": 0}
    with pytest.raises(RewardConfigError, match=r"reward\.terms\[0\]\.timeout_score: set it on"):
        build_reward({"accuracy_threshold": 1.0, "terms": [term]})


def test_a_call_after_an_abandon_starts_a_fresh_worker() -> None:
    """Abandoning idle workers costs nothing but their start: the next call is no abandoned
    one."""
    reward = _reward("worker_pid")
    pid = int(reward.score(["p"], ["r"], [None])[0][0])
    abandon_reward_calls()
    assert _gone(pid)
    assert reward.score(["p"], ["r"], [None])[0][0] not in (0.0, float(pid))
    reward.close()


def test_the_pre_run_check_refuses_a_reward_that_does_not_return() -> None:
    """The references and empty answers a working reward scores at once: past timeout_s on
    them, the run does not start (not row by row, not scored timeout_score)."""
    with pytest.raises(
        ConfigError,
        match=r"reward sleeps_always did not return on 4 answers .*reward\.timeout_s=0\.5s.*"
        r"\(tried before the run",
    ):
        compose_config(
            [
                "reward=custom",
                "reward._target_=tests.rewards.hanging_rewards.sleeps_always",
                "reward.timeout_s=0.5",
            ]
        )


def test_a_worker_that_cannot_start_is_an_error_not_timeout_scores(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that dies before it is ready (here: its reward module exits on import outside
    the trainer) stops the run with one line; it never scores every row timeout_score."""
    (tmp_path / "dies_outside_parent.py").write_text(
        "import os\n"
        "if os.getpid() != int(os.environ['ASTRAI_TEST_PARENT']):\n"
        "    os._exit(3)\n"
        "def reward(prompts, responses, answers):\n"
        "    return [1.0] * len(responses)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ASTRAI_TEST_PARENT", str(os.getpid()))
    reward = build_reward({"_target_": "dies_outside_parent.reward", "accuracy_threshold": 1.0})
    try:
        with pytest.raises(RewardError, match=r"exited before it was ready \(exit code 3"):
            reward.score(["p"], ["r"], ["a"])
        assert reward.take_timeouts() == 0
    finally:
        reward.close()
