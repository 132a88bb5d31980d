"""OpenPAI v2 accounts (docs/openpai-compat.md, "Accounts"): tokens and authentication here,
users in ``accounts_users``, groups in ``accounts_groups``.

Tokens are kept only as SHA-256 hashes, so ``GET /api/v2/tokens`` lists references,
``shoal-token-<id>``; ``DELETE /api/v2/tokens/{token}`` takes a reference or a token's value."""

from __future__ import annotations

import json
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials

from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context, bearer
from shoal.server.openpai import accounts_groups, accounts_users
from shoal.server.openpai.accounts_common import done, forbidden_application, user_token_only
from shoal.server.services import users

router = APIRouter(prefix="/api/v2", tags=["openpai"])

DEFAULT_LOGIN_S = 86400.0
MIN_LOGIN_S = 60.0
MAX_LOGIN_S = 7 * 86400.0


@router.get("/tokens")
def list_tokens(ctx: Context, caller: Caller) -> dict[str, list[str]]:
    """Your live user and application tokens, as references (``shoal-token-<id>``)."""
    user_token_only(caller)
    return {"tokens": users.token_references(ctx, caller)}


@router.delete("/tokens/{token}")
def revoke_token(token: str, ctx: Context, caller: Caller) -> dict[str, str]:
    """Revoke a token by reference or by value: yours, or anyone's for an admin."""
    users.revoke_reference(ctx, caller, token)
    return done("revoke successfully")


@router.post("/tokens/application")
def create_application_token(ctx: Context, caller: Caller) -> dict[str, object]:
    """A token that never expires and may only operate on jobs."""
    user_token_only(caller)
    _, token = users.create_token(ctx, caller, "application token (api/v2)", None, True)
    return {"token": token, "application": True}


@router.post("/authn/basic/login")
async def basic_login(request: Request, ctx: Context) -> dict[str, object]:
    """OpenPAI's login: form (or JSON, as OpenPAI's SDK sends) ``username``, ``password`` and
    ``expiration`` seconds (60 s to 7 days; a day if not given)."""
    fields = _login_fields(await request.body(), request.headers.get("content-type", ""))
    if not fields.get("username") or not fields.get("password"):
        raise ApiError(400, "InvalidParametersError", "username and password are required")
    try:
        expiration = float(fields.get("expiration") or DEFAULT_LOGIN_S)
    except ValueError:
        raise ApiError(400, "InvalidParametersError", "expiration is a number of seconds") from None
    if not MIN_LOGIN_S <= expiration <= MAX_LOGIN_S:
        raise ApiError(400, "InvalidParametersError", "expiration must be 60 s to 7 days")
    token, admin = users.login(ctx, fields["username"], fields["password"], expiration)
    return {"token": token, "user": fields["username"], "admin": admin}


def _login_fields(raw: bytes, content_type: str) -> dict[str, str]:
    if content_type.startswith("application/json"):
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise ApiError(400, "InvalidParametersError", "the body is not a JSON object")
        return {k: str(v) for k, v in body.items() if v is not None}
    return {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}


@router.delete("/authn/basic/logout")
def basic_logout(
    ctx: Context,
    caller: Caller,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> dict[str, str]:
    """Revoke the token this request came with (a user token: an application token's user
    revokes it with ``DELETE /api/v2/tokens/{token}``)."""
    if caller.kind != "user":
        raise forbidden_application()
    assert credentials is not None  # ``Caller`` has checked it
    users.revoke_presented(ctx, caller, credentials.credentials)
    return done("Logout successfully")


def _no_oidc(action: str) -> JSONResponse:
    """shoal has no OpenID Connect. OpenPAI without it does not serve these routes (404
    ``NoApiError``); its description gives them only a 302, so shoal redirects to
    ``/api/v2/info``, whose ``authnMethod: basic`` says how to log in, with the reason."""
    return JSONResponse(
        {
            "code": "NoApiError",
            "message": f"OIDC {action} is not configured on this server (authnMethod is basic); "
            "log in with POST /api/v2/authn/basic/login",
        },
        status_code=302,
        headers={"Location": "/api/v2/info"},
    )


@router.get("/authn/oidc/login", status_code=302, response_class=JSONResponse)
def oidc_login() -> JSONResponse:
    return _no_oidc("login")


@router.get("/authn/oidc/logout", status_code=302, response_class=JSONResponse)
def oidc_logout() -> JSONResponse:
    return _no_oidc("logout")


router.include_router(accounts_users.router)
router.include_router(accounts_groups.router)
