"""Who is behind a WebSocket: the same credentials and the same answers as the HTTP API's
(``deps.get_principal``, ``get_user``, ``get_agent``), as ``ApiError`` for the caller to turn into
an error frame and a close code (docs/terminal.md).

A browser cannot set headers on a WebSocket: ``websocket_principal`` also takes the dashboard's
session cookie, from a page of this server only (its ``Origin`` must be the server's own: the
WebSocket form of the CSRF check, since a WebSocket has no custom header)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast
from urllib.parse import urlparse

from fastapi.security import HTTPAuthorizationCredentials

from shoal.protocol import (
    MISMATCH_CODE,
    MISMATCH_STATUS,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    mismatch_message,
    parse_version,
)
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.deps import get_agent, get_principal, get_user, principal_of_token
from shoal.server.services.web_sessions import SESSION_COOKIE
from shoal.server.tls import peer_certificate

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.websockets import WebSocket


def _bearer(websocket: WebSocket) -> HTTPAuthorizationCredentials | None:
    """``Authorization: Bearer TOKEN`` (the scheme in any case), as FastAPI's HTTPBearer reads."""
    scheme, _, token = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip())


async def _any_principal(websocket: WebSocket, ctx: ServerContext) -> Principal:
    """A node certificate (TLS) or a Bearer token, checked exactly as for HTTP requests."""
    request = cast("Request", websocket)  # get_principal reads only the connection's scope
    return await get_principal(request, ctx, _bearer(websocket), None)


async def websocket_principal(websocket: WebSocket, ctx: ServerContext) -> Principal:
    """The user (or application) behind a user-side WebSocket; node certificates and agent
    tokens are refused as on the REST API (``ApiError`` 401/403). Without a Bearer token, the
    dashboard's session cookie, if the page is this server's."""
    cookie = websocket.cookies.get(SESSION_COOKIE)
    if _bearer(websocket) is None and cookie and peer_certificate(websocket.scope) is None:
        _same_origin(websocket)
        return await get_user(await principal_of_token(ctx, cookie, session=True))
    return await get_user(await _any_principal(websocket, ctx))


def _same_origin(websocket: WebSocket) -> None:
    """A session cookie is honoured only from a page this server served."""
    origin = websocket.headers.get("origin", "")
    host = websocket.headers.get("host", "")
    if not origin or urlparse(origin).netloc != host:
        raise ApiError(
            403,
            "CsrfTokenError",
            f"Origin: {origin or 'none'} is not this server ({host}); the dashboard's session "
            "may only open a terminal from the server's own page",
        )


async def websocket_agent(websocket: WebSocket, ctx: ServerContext) -> Principal:
    """The agent behind an agent-side WebSocket (its node certificate on a server on the
    network, the agent token in local mode), if it speaks this server's protocol version."""
    agent = await get_agent(ctx, await _any_principal(websocket, ctx))
    version = websocket.headers.get(PROTOCOL_HEADER)
    if parse_version(version) != PROTOCOL_VERSION:
        message = mismatch_message(version, str(PROTOCOL_VERSION))
        raise ApiError(MISMATCH_STATUS, MISMATCH_CODE, message)
    return agent
