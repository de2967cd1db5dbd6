"""The endpoint's routes (``endpoint.server`` serves them): OpenAI's ``GET /v1/models`` and
``POST /v1/chat/completions``, each refused (401) without the process's token (a completion
also without naming an open session: ``EndpointServer.session_of``). A chat
completion is handed to its session (``endpoint.session``) and answered when the environment
playing it has the turn. Imported only where a server starts: fastapi is the ``astrai[agent]``
extra.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from astrai.endpoint.session import Session, error_body


class Sessions(Protocol):
    """What the routes ask of the server (``endpoint.server.EndpointServer``)."""

    model: str

    def authorized(self, authorization: str | None) -> bool: ...

    def session_of(self, authorization: str | None, named: str | None = None) -> Session | None: ...


def _refused() -> JSONResponse:
    return JSONResponse(error_body("unknown API key", "authentication_error"), 401)


def endpoint_app(server: Sessions) -> FastAPI:
    """The app of ``server``: its sessions decide which keys are accepted."""
    app = FastAPI(title="astrai endpoint", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        if not server.authorized(request.headers.get("authorization")):
            return _refused()
        return {"object": "list", "data": [{"id": server.model, "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        authorization = request.headers.get("authorization")
        if not server.authorized(authorization):
            return _refused()  # before anything is read
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(error_body("the request body is not JSON"), 400)
        if not isinstance(body, dict):
            return JSONResponse(error_body("the request body is not a JSON object"), 400)
        # a key of the token alone names its session in the model: <model>@<session>
        named = str(body.get("model", "")).rpartition("@")[2]
        session = server.session_of(authorization, named)
        if session is None:
            return _refused()
        status, payload = await asyncio.wrap_future(session.submit(body))
        return JSONResponse(payload, status)

    return app
