"""One episode's calls through the endpoint (``endpoint.server``), handed to the environment that
plays them (``envs.agent``) in the order the client made them.

The client (an agent in a thread of its own) posts a request and waits; the environment takes
the request (``next_event``), lets the episode runner sample the turn, and answers it
(``answer``); when the agent returns, its value (or what it raised) is the session's last event
(``Finished``). One call at a time: a second request while one is unanswered is refused (409)
and breaks the session's trace (``broken``), as a request after the episode ended is refused
(410).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

Reply = tuple[int, dict[str, Any]]  # (HTTP status, JSON body)


@dataclass
class Call:
    """One request of the client: its JSON ``body`` and the future its HTTP reply waits on."""

    body: dict[str, Any]
    reply: Future[Reply] = field(default_factory=Future)


@dataclass(frozen=True)
class Finished:
    """The agent returned ``value`` or raised ``error`` (its thread ended)."""

    value: Any = None
    error: BaseException | None = None


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class Session:
    """The calls of one episode, from the HTTP server's threads to the environment's."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.events: queue.Queue[Call | Finished] = queue.Queue()
        self.broken: str | None = None  # why its trace broke (a second call in flight)
        self._pending: Call | None = None
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, body: dict[str, Any]) -> Future[Reply]:
        """The client's request ``body``: queued for the environment; its future answers it."""
        call = Call(body)
        with self._lock:
            if self._closed:
                call.reply.set_result((410, error_body("this episode is over: no more calls")))
                return call.reply
            if self._pending is not None and not self._pending.reply.done():
                self.broken = "a second call while one was unanswered (one call at a time)"
                call.reply.set_result((409, error_body(self.broken)))
                return call.reply
            self._pending = call
        self.events.put(call)
        return call.reply

    def finish(self, value: Any = None, error: BaseException | None = None) -> None:
        """The agent's thread ended, with ``value`` or ``error``."""
        self.events.put(Finished(value, error))

    def next_event(self, timeout_s: float) -> Call | Finished:
        """The next request, or the agent's end; ``TimeoutError`` after ``timeout_s``."""
        try:
            return self.events.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(
                f"the agent made no call and did not return in {timeout_s:g} s"
            ) from None

    def close(self, message: str) -> None:
        """No more calls: the one waiting (if any) and every later one is refused (410)."""
        with self._lock:
            self._closed = True
            pending = self._pending
        if pending is not None and not pending.reply.done():
            pending.reply.set_result((410, error_body(message)))
