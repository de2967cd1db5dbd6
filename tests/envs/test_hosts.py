"""Environment hosts (``envs.hosts``, issue 58): an environment's code runs where a hard limit
can end it. A step that holds the GIL or spins is killed with its worker process, the trainer
never freezes, an async environment keeps its event loop across calls, and a stop abandons the
waits at once. The environments are ``tests.host_envs``' (workers import them by path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.host_envs import (
    AsyncHangs,
    AsyncQueue,
    Counter,
    Misbehaves,
    parse_backtracking,
    parse_upper,
)

from astrai.envs.base import Environment, StepResult
from astrai.envs.hosts import (
    EnvHost,
    HostCall,
    HostPool,
    call_hosts,
    close_all_pools,
    pool_for_this_thread,
)
from astrai.envs.tool_calls import ParsedTurn
from astrai.envs.tool_limits import Limited, StepsAbandoned, abandon_steps_of
from astrai.paths import REPO_ROOT

ROW = {"text": "hello"}
START_S = 60.0  # a make's limit where the test is not about it (a worker's first start)


@pytest.fixture
def pool() -> Iterator[HostPool]:
    pool = HostPool("process")
    yield pool
    pool.close()


def one(host: EnvHost, method: str, *args: Any, timeout_s: float = 30.0) -> Limited:
    return call_hosts([HostCall(host, method, args, timeout_s)], max_concurrency=1)[0]


def made(host: EnvHost, cls: type[Environment] = Misbehaves, **kwargs: Any) -> EnvHost:
    """``host`` holding a fresh, reset ``cls(**kwargs)``."""
    assert one(host, "make", cls, kwargs, timeout_s=START_S).kind is None
    assert one(host, "reset", ROW).kind is None
    return host


def step(content: str) -> tuple[ParsedTurn]:
    return (ParsedTurn(content),)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_step_holding_the_gil_times_out_and_the_trainer_goes_on(pool: HostPool) -> None:
    host = made(pool.hosts(1)[0])
    beats: list[float] = []
    stop = threading.Event()

    def beat() -> None:  # the trainer's other work, which a frozen process would stall
        while not stop.is_set():
            beats.append(time.monotonic())
            time.sleep(0.05)

    heart = threading.Thread(target=beat, daemon=True)
    heart.start()
    time.sleep(0.1)
    start = time.monotonic()
    out = one(host, "step", ParsedTurn("backtrack"), timeout_s=1.0)
    took = time.monotonic() - start
    stop.set()
    heart.join()
    assert (out.kind, out.timed_out, out.error) == ("timeout", True, "timed out after 1 s")
    assert took < 2.0  # the regex alone runs for seconds (tests.host_envs.BACKTRACKING)
    during = [t for t in beats if start <= t <= start + took]
    gaps = [b - a for a, b in zip([start, *during], [*during, start + took], strict=True)]
    assert len(during) >= 10 and max(gaps) < 0.5, f"the process froze: a gap of {max(gaps)} s"


def test_spinning_steps_are_killed_with_their_workers(pool: HostPool) -> None:
    hosts = pool.hosts(8)
    makes = call_hosts([HostCall(h, "make", (Misbehaves, {}), START_S) for h in hosts], 8)
    assert [m.kind for m in makes] == [None] * 8
    pids = [h.pid for h in hosts]
    assert None not in pids and len(set(pids)) == 8  # one worker per slot
    outs = call_hosts([HostCall(h, "step", step("spin"), 0.5) for h in hosts], 8)
    assert [o.kind for o in outs] == ["timeout"] * 8
    assert [p for p in pids if p is not None and alive(p)] == []
    assert pool.live_abandoned() == 0
    assert [h.pid for h in hosts] == [None] * 8


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_an_async_environment_keeps_its_loop_across_calls(mode: str) -> None:
    pool = HostPool(mode)
    try:
        host = made(pool.hosts(1)[0], AsyncQueue)
        outs = [one(host, "step", ParsedTurn(c), timeout_s=10.0) for c in "abc"]
        assert [o.error for o in outs] == [None] * 3
        assert [o.value.reward for o in outs] == [1, 2, 3]
        seen = [o.value.observations[0]["content"] for o in outs]
        assert seen == ["a", "a,b", "a,b,c"]
        old = host.state.env  # thread mode: the environment lives here
        assert one(host, "make", AsyncQueue, {}).kind is None
    finally:
        pool.close()
    if mode == "thread":
        assert old.consumer.cancelled()  # by the make: no task outlives its environment
        loop = old.consumer.get_loop()
        deadline = time.monotonic() + 10.0
        while not loop.is_closed() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.is_closed()  # by the close, in a thread of its own


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_hanging_and_raising_user_code_is_an_outcome(pool: HostPool) -> None:
    host = pool.hosts(1)[0]
    assert one(host, "make", Misbehaves, {}, timeout_s=START_S).kind is None
    hung = one(host, "reset", {"fault": "hang"}, timeout_s=0.5)
    assert (hung.kind, hung.error) == ("timeout", "timed out after 0.5 s")
    hung_init = one(host, "make", Misbehaves, {"init": "hang"}, timeout_s=1.0)
    assert (hung_init.kind, hung_init.error) == ("timeout", "timed out after 1 s")
    assert one(host, "make", Misbehaves, {}, timeout_s=START_S).kind is None
    raised = one(host, "reset", {"fault": "raise"})
    assert (raised.kind, raised.error) == ("raised", "KeyError: 'no such row'")
    refused = one(host, "reset", {"fault": "connection"})
    assert refused.kind == "raised"
    assert refused.error == "ConnectionError: the sandbox refused the connection"
    assert one(host, "reset", ROW).value == [{"role": "user", "content": "hello"}]
    bad_init = one(host, "make", Misbehaves, {"init": "raise"})
    assert (bad_init.kind, bad_init.error) == ("raised", "ValueError: a constructor that refuses")
    after = one(host, "reset", ROW)
    assert after.kind == "unsent" and "its make raised" in (after.error or "")


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_slot_keeps_its_state_and_is_reused_across_rollouts(mode: str) -> None:
    pool = HostPool(mode)
    try:
        for _rollout in range(2):
            host = made(pool.hosts(2)[1], Counter)
            outs = [one(host, "step", ParsedTurn(str(i))) for i in range(3)]
            assert [o.value.reward for o in outs] == [1, 2, 3]  # a fresh counter each rollout
            assert one(host, "final_reward").value == 30.0
            assert one(host, "tools").value == [{"type": "function", "function": {"name": "count"}}]
            pid = outs[0].value.metrics["pid"]
            assert pid == (os.getpid() if mode == "thread" else host.pid)
            if _rollout == 0:
                first_pid = pid
        assert pid == first_pid  # the same worker served both rollouts
        assert pool.hosts(2)[1] is host
    finally:
        pool.close()


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_a_killed_worker_gives_way_to_a_new_one_at_make(pool: HostPool) -> None:
    host = made(pool.hosts(1)[0])
    old_pid = host.pid
    assert one(host, "step", ParsedTurn("hang"), timeout_s=0.3).kind == "timeout"
    gone = one(host, "step", ParsedTurn("again"))
    assert gone.kind == "unsent"
    assert (
        gone.error
        == "step: the environment is gone (its worker was killed after a timeout of 0.3 s)"
    )
    made(host)
    assert host.pid not in (None, old_pid)
    assert one(host, "step", ParsedTurn("pid")).value.metrics["pid"] == host.pid


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_stop_abandons_the_wait_and_kills_the_worker(mode: str) -> None:
    pool = HostPool(mode)
    host = made(pool.hosts(1)[0])
    pid = host.pid
    ended: list[tuple[str, float]] = []

    def play() -> None:
        try:
            one(host, "step", ParsedTurn("hang"), timeout_s=60.0)
            ended.append(("returned", time.monotonic()))
        except StepsAbandoned:
            ended.append(("abandoned", time.monotonic()))

    sampling = threading.Thread(target=play, daemon=True)
    sampling.start()
    time.sleep(0.5)  # the step is in flight
    abandoned_at = time.monotonic()
    abandon_steps_of(sampling)
    sampling.join(5.0)
    assert ended and ended[0][0] == "abandoned"
    assert ended[0][1] - abandoned_at < 0.5
    if mode == "process":
        assert pid is not None and not alive(pid) and pool.live_abandoned() == 0
    else:  # a thread cannot be killed: it sleeps on, counted
        assert pid is None and pool.live_abandoned() == 1
    assert "abandoned (the run stopped)" in (one(host, "step", ParsedTurn("x")).error or "")
    pool.close()


class Stop(BaseException):
    """What a stop signal's handler raises in the main thread (``StopInterrupt``'s stand-in)."""


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_a_signal_handler_raising_while_waiting_kills_the_worker(pool: HostPool) -> None:
    host = made(pool.hosts(1)[0])
    pid = host.pid
    assert pid is not None

    def stop(signum: int, frame: Any) -> None:
        raise Stop

    old = signal.signal(signal.SIGALRM, stop)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Stop):
            one(host, "step", ParsedTurn("backtrack"), timeout_s=60.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert not alive(pid) and pool.live_abandoned() == 0 and host.pid is None


def test_a_worker_that_dies_is_reported_with_its_exit_code(pool: HostPool) -> None:
    host = made(pool.hosts(1)[0])
    exited = one(host, "step", ParsedTurn("exit"))
    assert exited.kind == "died"
    assert exited.error == "step: its worker process died (exit code 3)"
    made(host)
    crashed = one(host, "step", ParsedTurn("segfault"))
    assert (crashed.kind, crashed.error) == (
        "died",
        "step: its worker process died (exit code -11, SIGSEGV)",
    )
    assert "died (exit code -11" in (one(host, "final_reward").error or "")
    made(host)
    pid = host.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # between calls (an environment's own thread, the OOM killer)
    deadline = time.monotonic() + 10.0
    while alive(pid) and time.monotonic() < deadline:  # long dead by the next episode's make
        time.sleep(0.01)
    time.sleep(0.1)
    made(host)  # a make starts a new worker
    assert one(host, "step", ParsedTurn("pid")).value.metrics["pid"] == host.pid


def test_what_cannot_cross_to_a_worker_is_named(pool: HostPool) -> None:
    class Local(Environment):
        def reset(self, row: dict) -> list[dict]:
            return []

        def step(self, turn: ParsedTurn) -> StepResult:
            return StepResult(done=True)

    host = pool.hosts(1)[0]
    out = one(host, "make", Local, {})
    assert out.kind == "unsent"
    assert "test_what_cannot_cross_to_a_worker_is_named.<locals>.Local" in (out.error or "")
    assert "env.workers=thread" in (out.error or "")
    made(host)
    unsent_back = one(host, "step", ParsedTurn("unpicklable"))
    assert unsent_back.kind == "raised" and "cannot be sent back" in (unsent_back.error or "")
    assert "lock" in (unsent_back.error or "")
    thread_host = HostPool("thread").hosts(1)[0]  # a thread host takes the local class
    assert one(thread_host, "make", Local, {}).kind is None
    assert one(thread_host, "reset", ROW).value == []


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_a_parser_runs_in_the_host_within_its_limit(pool: HostPool) -> None:
    host = made(pool.hosts(1)[0])
    parsed = one(host, "parse", parse_upper, "hi")
    assert parsed.value == ParsedTurn(content=f"HI@{host.pid}")
    start = time.monotonic()
    stuck = one(host, "parse", parse_backtracking, "hi", timeout_s=0.5)
    assert stuck.kind == "timeout" and time.monotonic() - start < 1.5


def test_a_call_on_a_slot_with_no_environment_is_refused(pool: HostPool) -> None:
    host = pool.hosts(1)[0]
    out = one(host, "step", ParsedTurn("x"))
    assert out == Limited(error="step: the environment is gone (no environment was made in it)")
    assert out.kind == "unsent" and host.pid is None  # no worker started for it


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_a_timed_out_async_step_is_cancelled_in_thread_mode() -> None:
    pool = HostPool("thread")
    AsyncHangs.cancelled.clear()
    host = made(pool.hosts(1)[0], AsyncHangs)
    assert one(host, "step", ParsedTurn("x"), timeout_s=0.3).kind == "timeout"
    assert AsyncHangs.cancelled.wait(5.0)
    deadline = time.monotonic() + 5.0
    while pool.live_abandoned() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool.live_abandoned() == 0  # the cancelled task ended its thread


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_at_most_max_concurrency_calls_run_at_once(pool: HostPool) -> None:
    hosts = pool.hosts(4)
    assert [
        o.kind
        for o in call_hosts([HostCall(h, "make", (Misbehaves, {}), START_S) for h in hosts], 4)
    ] == [None] * 4
    outs = call_hosts([HostCall(h, "step", step("sleep:0.4"), 30.0) for h in hosts], 2)
    spans = [(o.value.reward, o.value.metrics["ended"]) for o in outs]
    most = max(sum(a <= t < b for a, b in spans) for t, _ in spans)
    assert most == 2


def test_each_thread_has_its_own_pool() -> None:
    mine = pool_for_this_thread("process")
    assert pool_for_this_thread("process") is mine
    assert pool_for_this_thread("thread") is not mine
    theirs: list[HostPool] = []
    other = threading.Thread(target=lambda: theirs.append(pool_for_this_thread("process")))
    other.start()
    other.join()
    assert theirs and theirs[0] is not mine
    close_all_pools()
    assert pool_for_this_thread("process") is not mine
    with pytest.raises(ValueError, match="env.workers must be one of process, thread"):
        pool_for_this_thread("fork")
    close_all_pools()


def test_a_step_result_comes_back_whole(pool: HostPool) -> None:
    host = made(pool.hosts(1)[0], Counter)
    out = one(host, "step", ParsedTurn("x"))
    assert isinstance(out.value, StepResult) and out.value.observations == [
        {"role": "tool", "content": "x"}
    ]
    assert out.kind is None and out.seconds >= 0


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_a_process_exits_with_its_workers_left_open() -> None:
    """A pool never closed: the interpreter's exit kills its workers rather than waiting on
    them (multiprocessing's exit handler joins every child it started)."""
    script = (
        "from astrai.envs.hosts import HostCall, HostPool, call_hosts\n"
        "from tests.host_envs import Counter\n"
        "host = HostPool('process').hosts(1)[0]\n"
        "out = call_hosts([HostCall(host, 'make', (Counter, {}), 60.0)], 1)[0]\n"
        "print(out.kind, host.pid, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stderr
    kind, pid = done.stdout.split()
    assert kind == "None" and not alive(int(pid))


def test_a_module_a_worker_cannot_import_is_a_raised_make(
    pool: HostPool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment module that imports in the trainer but raises elsewhere: its forkserver
    cannot preload it (a worker starts without it), and the worker's make says why."""
    (tmp_path / "trainer_only_env.py").write_text(
        "import os\n"
        "from astrai.envs.base import Environment\n"
        "if os.getpid() != int(os.environ['ASTRAI_TEST_PARENT']):\n"
        "    raise RuntimeError('not in the trainer')\n"
        "class Env(Environment):\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ASTRAI_TEST_PARENT", str(os.getpid()))
    from trainer_only_env import Env  # type: ignore[import-not-found]

    out = one(pool.hosts(1)[0], "make", Env, {}, timeout_s=START_S)
    assert out.kind == "raised"
    assert out.error == ("the call cannot be read in its worker: RuntimeError: not in the trainer")


def test_a_worker_kept_across_runs_imports_from_a_path_added_after_it_started(
    pool: HostPool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot's worker outlives a run (the thread's pool); the next run may put a user's folder
    on ``sys.path`` (``examples/tool_env``): each call brings the caller's path along. Before,
    the worker kept the path it started with and every reused slot failed to import the
    class."""
    host = made(pool.hosts(1)[0], Counter)
    pid = host.pid
    (tmp_path / "later_env.py").write_text(
        "from tests.host_envs import Counter\nclass Later(Counter):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from later_env import Later  # type: ignore[import-not-found]

    made(host, Later)
    assert host.pid == pid and one(host, "step", ParsedTurn("x")).value.reward == 1
