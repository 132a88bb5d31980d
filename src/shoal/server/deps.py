"""Request dependencies: the server context and the authenticated caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from shoal.server.auth import Principal, authenticate
from shoal.server.context import ApiError, ServerContext

bearer = HTTPBearer(auto_error=False, description="An API token (`shoal up` writes one).")


def get_context(request: Request) -> ServerContext:
    context: ServerContext = request.app.state.context
    return context


Context = Annotated[ServerContext, Depends(get_context)]


def get_principal(
    ctx: Context,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "UnauthorizedUserError", "a Bearer token is required")
    principal = authenticate(ctx.db, credentials.credentials, ctx.clock())
    if principal is None:
        raise ApiError(401, "UnauthorizedUserError", "the token is unknown, revoked or expired")
    return principal


def get_agent(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if principal.kind != "agent" and not principal.is_admin:
        raise ApiError(403, "ForbiddenUserError", "only agents may call the agent API")
    return principal


def get_user(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if principal.kind == "agent":
        raise ApiError(403, "ForbiddenUserError", "agent tokens may only call the agent API")
    return principal


Caller = Annotated[Principal, Depends(get_user)]
AgentCaller = Annotated[Principal, Depends(get_agent)]
