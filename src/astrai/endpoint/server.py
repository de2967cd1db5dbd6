"""The endpoint's HTTP server: a FastAPI app served by uvicorn in a daemon thread of this process,
bound to 127.0.0.1 on a free port, one per process (``endpoint_server``), started at its first
use (an agent episode's ``reset``: in the trainer under ``env.workers=thread``, in each episode
worker under ``process``).

Routes, OpenAI's: ``GET /v1/models`` and ``POST /v1/chat/completions``. A request must carry
``Authorization: Bearer <key>`` with the key of an open session (``open_session``): the
process's random token and the session's id, so a request from outside the run, or for an
episode that is over, is refused (401) before anything is read. A chat completion is handed
to its session (``endpoint.session``) and answered when the environment playing it has the
turn; nothing here samples.

fastapi and uvicorn are the ``astrai[agent]`` extra, imported by a server's start only
(``endpoint.app`` holds the routes).
"""

from __future__ import annotations

import secrets
import socket
import threading
import time

from astrai.endpoint.session import Session

START_TIMEOUT_S = 30.0  # how long ``EndpointServer`` waits for uvicorn to listen
EXTRA = "the endpoint (env=agent) needs fastapi and uvicorn: pip install 'astrai[agent]'"

_server: EndpointServer | None = None
_server_lock = threading.Lock()


class EndpointServer:
    """One process's endpoint: its ``url`` (``http://127.0.0.1:<port>/v1``) and its sessions."""

    def __init__(self, model: str = "astrai") -> None:
        try:
            import uvicorn
        except ImportError as err:
            raise ImportError(f"{EXTRA} ({err})") from None
        self.model = model
        self.token = secrets.token_hex(16)
        self.sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on a socket whose proto says TCP; a
        # proto of 0 leaves Nagle on, and each reply waited 40 ms for the client's delayed ACK
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        from astrai.endpoint.app import endpoint_app

        config = uvicorn.Config(
            endpoint_app(self), log_level="warning", access_log=False, lifespan="off", workers=1
        )
        self._uvicorn = uvicorn.Server(config)
        thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [sock]}, name="astrai-endpoint",
            daemon=True,
        )  # fmt: skip
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._uvicorn.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the endpoint did not start on 127.0.0.1:{self.port}")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def open_session(self) -> tuple[Session, str]:
        """A new session and its API key (the only key its requests are accepted with)."""
        sid = secrets.token_hex(8)
        session = Session(sid)
        with self._lock:
            self.sessions[sid] = session
        return session, f"{self.token}.{sid}"

    def close_session(self, session: Session, message: str) -> None:
        """The episode is over: its key is refused from now on, a waiting call answered 410."""
        session.close(message)
        with self._lock:
            self.sessions.pop(session.sid, None)

    def authorized(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries this process's token (the key's part
        before its ``.``)."""
        if not authorization or not authorization.startswith("Bearer "):
            return False
        token = authorization[len("Bearer ") :].strip().partition(".")[0]
        return secrets.compare_digest(token, self.token)

    def session_of(self, authorization: str | None, named: str | None = None) -> Session | None:
        """The open session an ``Authorization`` header's key names, or None. The key is
        ``<token>.<session>``, or the process's token alone with the session ``named``
        otherwise (by the request's model, ``<model>@<session>``): for a client that reads its
        key once per process from the environment and is shared by every episode
        (``env=verifiers``)."""
        if not self.authorized(authorization):
            return None
        assert authorization is not None
        sid = authorization.partition(".")[2].strip() or (named or "")
        with self._lock:
            return self.sessions.get(sid)


def endpoint_server() -> EndpointServer:
    """This process's endpoint, started at the first call."""
    global _server
    with _server_lock:
        if _server is None:
            _server = EndpointServer()
        return _server
