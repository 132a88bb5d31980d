"""The dashboard's session: ``POST /api/v1/session`` signs in (a token, or a user and password),
``GET`` says who is signed in, ``DELETE`` signs out (``services/web_sessions.py``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context, principal_of_token
from shoal.server.services import web_sessions
from shoal.server.services.web_sessions import SESSION_COOKIE, SESSION_S, csrf_token

router = APIRouter(prefix="/api/v1/session", tags=["session"])


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str | None = Field(None, description="An API token (user or application).")
    username: str | None = None
    password: str | None = None


class SessionOut(BaseModel):
    signedIn: bool = True
    user: str | None
    admin: bool = False
    groups: list[str] = []
    csrfToken: str = Field("", description="Send it as X-Shoal-CSRF on every state-changing call.")
    expiresIn: float | None = None


@router.post("", response_model=SessionOut)
def sign_in(body: SignIn, response: Response, ctx: Context) -> SessionOut:
    """Sign in to the dashboard: the answer sets the HttpOnly session cookie."""
    if body.token:
        token, principal = web_sessions.sign_in_with_token(ctx, body.token.strip())
        user, admin, groups = principal.user, principal.is_admin, list(principal.groups)
    elif body.username and body.password:
        token, admin = web_sessions.sign_in_with_password(ctx, body.username, body.password)
        user, groups = body.username, []
    else:
        raise ApiError(
            400,
            "InvalidParametersError",
            "token, or username and password, are required to sign in",
        )
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=int(SESSION_S),
        httponly=True,
        samesite="strict",
        secure=ctx.settings.tls,
        path="/",
    )
    return SessionOut(
        user=user, admin=admin, groups=groups, csrfToken=csrf_token(token), expiresIn=SESSION_S
    )


@router.get("", response_model=SessionOut)
async def current(request: Request, ctx: Context) -> SessionOut:
    """Who this browser's session is: ``signedIn: false`` (not a 401) when there is none or it
    has ended, so the page asks without an error."""
    token = request.cookies.get(SESSION_COOKIE, "")
    try:
        caller = await principal_of_token(ctx, token, session=True) if token else None
    except ApiError:
        caller = None
    if caller is None or caller.kind not in ("user", "application"):
        return SessionOut(signedIn=False, user=None)
    return SessionOut(
        user=caller.user,
        admin=caller.is_admin,
        groups=list(caller.groups),
        csrfToken=csrf_token(token),
    )


@router.delete("", status_code=204)
def sign_out(request: Request, ctx: Context, _: Caller) -> Response:
    """Sign out: revoke the session and drop its cookie."""
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        web_sessions.sign_out(ctx, token)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
