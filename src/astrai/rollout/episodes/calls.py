"""The episode runner's calls into user code, each within the environment limits (issue 58,
findings 3, 4, 6 and 9): construction, ``reset``, ``step``, ``final_reward`` and a user's turn
parser all go through the episode's slot (``envs.hosts``: a worker process a timeout can kill,
or a thread by choice; an ``async def`` awaited on the slot's own long-lived loop), each timed
within ``step_timeout_s`` and what is left of the episode's ``episode_timeout_s``; what comes
back is checked at the door (``envs.values``). A fault fails its episode with a cause
(``FAILURE_CAUSES``, counted as ``env/failed_<cause>``), and the first fault of each cause of
each environment is logged once, with its reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from astrai.envs.base import Environment
from astrai.envs.episode_tokens import EpisodeTokens
from astrai.envs.hosts import EnvHost, HostCall, HostPool, call_hosts, pool_for_this_thread
from astrai.envs.tool_limits import Limited
from astrai.envs.values import BadValue

log = logging.getLogger("astrai.training.trainer")  # the trainer's lines, one logger name

# why an episode failed: its environment ran past a time limit, raised, its worker died, it
# returned a value the runner cannot use, answered with too many characters, with text the
# tokenizer cannot encode, opened its group's episodes differently (rollout.episodes.rollout), or
# is an agent whose call did not extend its episode's trace (``endpoint.trace.TraceBreak``, whose
# ``failure_cause`` the host's reply carries: ``envs.host_worker``)
FAILURE_CAUSES = (
    "timeout",
    "raised",
    "died",
    "invalid",
    "flood",
    "observation",
    "opening",
    "trace_break",
)
_told: set[tuple[str, str]] = set()  # (environment, cause) already logged by this process
_told_lock = threading.Lock()


class EnvironmentFailing(RuntimeError):
    """Every episode failed, several steps in a row (``training.reward_signal``): the
    environment is broken, not unlucky; the run stops with this one line."""


@dataclass
class Episode:
    """One episode's outcome: its ``tokens``, rewards per turn, the final reward, and how it
    ended (``done``, ``truncated``, or ``failed`` with the ``cause`` and ``error``); counts for
    ``env/*`` and the environment's own ``metrics`` summed over its steps. ``env_s``: the
    seconds its environment's calls took in all (``episode_timeout_s`` bounds them),
    ``step_s`` those of its steps."""

    tokens: EpisodeTokens
    turn_rewards: list[float] = field(default_factory=list)
    final_reward: float = 0.0
    done: bool = False
    truncated: bool = False
    failed: bool = False
    cause: str | None = None
    error: str | None = None
    tool_calls: int = 0
    parse_errors: int = 0
    timeouts: int = 0
    steps: int = 0
    step_s: float = 0.0
    env_s: float = 0.0
    abandoned_workers: int = 0  # the runner's live abandoned workers when the episode ended
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return not (self.done or self.truncated or self.failed)


def note_failure(episode: Episode, environment: str, cause: str, reason: str) -> None:
    """Fail ``episode`` for ``cause`` (one of ``FAILURE_CAUSES``) with ``reason`` (one line);
    the first failure of each cause of each ``environment`` is logged, once per process."""
    assert cause in FAILURE_CAUSES, cause
    episode.failed, episode.cause, episode.error = True, cause, reason
    key = (environment, cause)
    with _told_lock:
        first = key not in _told
        _told.add(key)
    if first:
        log.warning(
            "env %s: an episode failed (%s): %s; further failures of this kind are counted in "
            "env/failed_%s, not logged",
            environment,
            cause,
            reason,
            cause,
        )


def given_environment(env: Environment) -> Environment:
    """A slot's "constructor" for an environment built by the caller (a test's instance)."""
    return env


@dataclass
class EnvSlots:
    """Where a batch's episodes run: one host per episode (of ``pool``), what each builds its
    environment from (``makes``: ``(cls, kwargs)``), the environment's name for messages;
    ``owned``: the runner closes the pool when the batch is done (else it outlives it)."""

    hosts: list[EnvHost]
    makes: list[tuple[Callable[..., Any], dict[str, Any]]]
    environment: str
    pool: HostPool
    owned: bool = False

    @property
    def reads_tokens(self) -> bool:
        """Whether its environments read each turn's tokens (``Environment.reads_tokens``)."""
        return any(
            getattr(kwargs["env"] if make is given_environment else make, "reads_tokens", False)
            for make, kwargs in self.makes
        )

    @classmethod
    def of_class(
        cls, env_cls: type[Environment], kwargs: dict[str, Any], n: int, workers: str, name: str
    ) -> EnvSlots:
        """``n`` slots of this thread's ``workers`` pool, each building ``env_cls(**kwargs)``."""
        pool = pool_for_this_thread(workers)
        return cls(pool.hosts(n), [(env_cls, kwargs)] * n, name, pool)

    @classmethod
    def of_instances(cls, envs: Sequence[Environment]) -> EnvSlots:
        """Environments already built (they live in this process): thread hosts, closed after."""
        pool = HostPool("thread")
        makes = [(given_environment, {"env": env}) for env in envs]
        name = type(envs[0]).__name__ if envs else "environment"
        return cls(pool.hosts(len(envs)), makes, name, pool, owned=True)

    def close(self) -> None:
        """The batch is done: close the pool if the slots own it."""
        if self.owned:
            self.pool.close()


def call_all(
    slots: EnvSlots,
    episodes: Sequence[Episode],
    requests: Sequence[tuple[int, str, tuple[Any, ...]]],
    step_timeout_s: float,
    episode_timeout_s: float,
    max_concurrency: int,
) -> dict[int, Any]:
    """Run each ``(episode index, method, args)`` request on its episode's host within the
    limits; the values of the calls that succeeded, by episode index. A call that fails (or
    whose episode has no time left, or whose episode failed already) fails its episode, with
    the cause."""
    calls, asked = [], []
    for i, method, args in requests:
        episode = episodes[i]
        if episode.failed:
            continue
        left = episode_timeout_s - episode.env_s
        if left <= 0:  # never start a call the episode has no time for: it could only leak
            episode.timeouts += 1
            note_failure(
                episode,
                slots.environment,
                "timeout",
                f"{method}: no time left of env.episode_timeout_s={episode_timeout_s:g}",
            )
            continue
        calls.append(HostCall(slots.hosts[i], method, args, min(step_timeout_s, left)))
        asked.append((i, method))
    values: dict[int, Any] = {}
    for (i, method), outcome in zip(asked, call_hosts(calls, max_concurrency), strict=True):
        episode = episodes[i]
        episode.env_s += outcome.seconds
        if method == "step":
            episode.steps += 1
            episode.step_s += outcome.seconds
        if outcome.error is None:
            values[i] = outcome.value
        else:
            _failed_call(episode, slots.environment, method, outcome)
    return values


def _failed_call(episode: Episode, environment: str, method: str, outcome: Limited) -> None:
    """Fail ``episode`` for a call of ``method`` that did not return a value."""
    kind = getattr(outcome, "kind", None) or ("timeout" if outcome.timed_out else "raised")
    cause = kind if kind in FAILURE_CAUSES else "raised"  # a declared cause it counts, or raised
    episode.timeouts += int(cause == "timeout")
    note_failure(episode, environment, cause, f"{method}: {outcome.error}")


def checked(
    episode: Episode, environment: str, value: Any, check: Callable[[Any], Any]
) -> tuple[bool, Any]:
    """``(True, check(value))``, or ``(False, None)`` with the episode failed as ``invalid``
    when ``check`` raises ``BadValue``."""
    try:
        return True, check(value)
    except BadValue as err:
        note_failure(episode, environment, "invalid", str(err))
        return False, None
