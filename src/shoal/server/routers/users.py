"""Users and tokens: ``/api/v1/users``, ``/api/v1/tokens``, ``/api/v1/me``. OpenPAI's login and
accounts are under ``/api/v2`` (``server/openpai/accounts.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from shoal.server.admin_schemas import (
    ChangeResult,
    Me,
    NewToken,
    NewUser,
    TokenIn,
    TokenOut,
    UserDeleted,
    UserIn,
    UserOut,
    UserPatch,
)
from shoal.server.deps import Caller, Context
from shoal.server.limits import SQL_INT_MAX
from shoal.server.services import users

router = APIRouter(tags=["users"])


@router.post("/api/v1/users", response_model=NewUser, status_code=201)
def create_user(body: UserIn, ctx: Context, caller: Caller) -> NewUser:
    """Create a user (admins); the answer carries their first token, shown only this once."""
    user, token = users.create_user(ctx, caller, body)
    return NewUser(**user.model_dump(), token=token)


@router.get("/api/v1/users", response_model=list[UserOut])
def list_users(ctx: Context, caller: Caller) -> list[UserOut]:
    return users.list_users(ctx, caller)


@router.patch("/api/v1/users/{name}", response_model=ChangeResult)
def patch_user(
    name: str,
    body: UserPatch,
    ctx: Context,
    caller: Caller,
    dry_run: Annotated[bool, Query(alias="dryRun")] = False,
) -> ChangeResult:
    """Change only the settings given (admins); ``password: null`` removes the password.
    ``dryRun=true`` answers the same and writes nothing."""
    return users.patch_user(ctx, caller, name, body, dry_run=dry_run)


@router.delete("/api/v1/users/{name}", response_model=UserDeleted)
def delete_user(
    name: str,
    ctx: Context,
    caller: Caller,
    stop_jobs: Annotated[bool, Query(alias="stopJobs")] = False,
) -> UserDeleted:
    """Delete a user and revoke their tokens (admins). Active jobs make it a 409 unless
    ``stopJobs=true``, which stops them first; finished jobs stay under the user's name."""
    return UserDeleted(name=name, stoppedJobs=users.delete_user(ctx, caller, name, stop_jobs))


@router.get("/api/v1/me", response_model=Me)
def me(caller: Caller) -> Me:
    return Me(
        name=caller.user, admin=caller.is_admin, groups=list(caller.groups), tokenKind=caller.kind
    )


@router.post("/api/v1/tokens", response_model=NewToken, status_code=201)
def create_token(body: TokenIn, ctx: Context, caller: Caller) -> NewToken:
    """A new token for yourself; ``application`` tokens may only operate on jobs."""
    out, token = users.create_token(ctx, caller, body.label, body.expires_in_s, body.application)
    return NewToken(**out.model_dump(), token=token)


@router.get("/api/v1/tokens", response_model=list[TokenOut])
def list_tokens(ctx: Context, caller: Caller) -> list[TokenOut]:
    """Your tokens (all, for admins); never their secret values."""
    return users.list_tokens(ctx, caller)


@router.delete("/api/v1/tokens/{token_id}", status_code=204)
def revoke_token(
    token_id: Annotated[int, Path(ge=0, le=SQL_INT_MAX)],  # SQLite integers are 64-bit
    ctx: Context,
    caller: Caller,
) -> None:
    users.revoke_token(ctx, caller, token_id)
