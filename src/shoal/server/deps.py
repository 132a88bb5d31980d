"""Request dependencies: the server context and the authenticated caller.

Users and applications send Bearer tokens. On a server on the network, agents send no token: the
TLS layer verified their client certificate against the cluster's CA (``server.tls``) and
``node_auth`` maps it to its node. A node certificate is refused on user endpoints, and a Bearer
token on the agent API of such a server (it would name no node)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from shoal.server.auth import Principal, look_up_token
from shoal.server.context import ApiError, ServerContext
from shoal.server.node_auth import FORBIDDEN_NODE, authenticate_node, cached_node
from shoal.server.services import audit
from shoal.server.services.web_sessions import CSRF_HEADER, SESSION_COOKIE, csrf_matches
from shoal.server.tls import peer_certificate

bearer = HTTPBearer(auto_error=False, description="An API token (`shoal up` writes one).")
session_cookie = APIKeyCookie(
    name=SESSION_COOKIE,
    auto_error=False,
    description="The dashboard's session (POST /api/v1/session); state-changing calls made "
    f"with it need the session's CSRF token in {CSRF_HEADER}.",
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def get_context(request: Request) -> ServerContext:
    context: ServerContext = request.app.state.context
    return context


Context = Annotated[ServerContext, Depends(get_context)]

# The dependencies are ``async``: FastAPI runs a plain ``def`` dependency in a worker thread, one
# hand-off per dependency per request. They take no time of their own; a credential that is not
# in the cache is looked up in a worker thread, so the event loop never waits on the store.


async def get_principal(
    request: Request,
    ctx: Context,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    cookie: Annotated[str | None, Depends(session_cookie)],
) -> Principal:
    found = await certificate_or_token(request, ctx, credentials)
    if found is not None:
        return found
    if cookie:
        if request.method not in SAFE_METHODS and not csrf_matches(
            request.headers.get(CSRF_HEADER), cookie
        ):
            raise ApiError(
                403,
                "CsrfTokenError",
                f"{CSRF_HEADER}: missing or wrong; a state-changing call made with the "
                "dashboard's session cookie must send the session's CSRF token (sign in again)",
            )
        return await principal_of_token(ctx, cookie, session=True)
    raise ApiError(
        401,
        "UnauthorizedUserError",
        "a Bearer token (or a node certificate, or a dashboard session) is required",
    )


async def certificate_or_token(
    request: Request, ctx: ServerContext, credentials: HTTPAuthorizationCredentials | None
) -> Principal | None:
    """The caller by its node certificate or Bearer token; None if it sent neither."""
    certificate = peer_certificate(request.scope)
    if certificate is not None:  # verified against the CA by the TLS handshake
        node = cached_node(ctx.db, certificate)
        if node is None:
            node = await run_in_threadpool(authenticate_node, ctx.db, certificate)
        audit.set_caller(node)
        return node
    if credentials is not None and credentials.credentials:
        return await principal_of_token(ctx, credentials.credentials)
    return None


async def agent_caller(
    request: Request, ctx: ServerContext, credentials: HTTPAuthorizationCredentials | None
) -> Principal:
    """``get_agent`` in one call, for the agent API's routes (every node calls them every few
    seconds: FastAPI's dependency solving is a good part of such a request's cost). Agents
    send a certificate or a token, never the dashboard's cookie."""
    principal = await certificate_or_token(request, ctx, credentials)
    if principal is None:
        raise ApiError(
            401, "UnauthorizedUserError", "a node certificate (or an agent token) is required"
        )
    return await get_agent(ctx, principal)


async def principal_of_token(ctx: ServerContext, token: str, session: bool = False) -> Principal:
    """The principal a token (or a session cookie's token) stands for; 401 if there is none."""
    principal = await look_up_token(ctx.db, token, ctx.clock())
    if principal is None:
        message = (
            "the dashboard session has ended (signed out or expired): sign in again"
            if session
            else "the token is unknown, revoked or expired"
        )
        raise ApiError(401, "UnauthorizedUserError", message)
    audit.set_caller(principal)
    new_client = audit.unseen_client(ctx, principal)
    if new_client is not None:  # the first request of this token from this client
        await run_in_threadpool(audit.note_token_use, ctx, principal, new_client)
    return principal


async def get_agent(
    ctx: Context, principal: Annotated[Principal, Depends(get_principal)]
) -> Principal:
    if principal.kind in ("node", "kubernetes"):  # kubernetes: the Kubernetes agent's token
        return principal
    if ctx.settings.tls:
        raise ApiError(
            403,
            "ForbiddenUserError",
            "the agent API of a server on the network takes node certificates only: join the "
            "node with `shoal agent join` and run `shoal agent run`",
        )
    if principal.kind != "agent" and not principal.is_admin:
        raise ApiError(403, "ForbiddenUserError", "only agents may call the agent API")
    return principal


async def get_user(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if principal.kind == "node":
        raise ApiError(
            403,
            FORBIDDEN_NODE,
            f"the certificate of node {principal.node} may only call the agent API "
            "(/api/v1/agent); users call with a Bearer token",
        )
    if principal.kind in ("agent", "kubernetes"):
        raise ApiError(403, "ForbiddenUserError", "agent tokens may only call the agent API")
    return principal


Caller = Annotated[Principal, Depends(get_user)]
