"""Users, groups and API tokens. Tokens are random secrets stored only as SHA-256 hashes; a user
sees, stops and reads the logs of their own jobs only, unless admin."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from shoal.server.admin_schemas import (
    ChangeResult,
    FieldChange,
    TokenOut,
    UserIn,
    UserOut,
    UserPatch,
)
from shoal.server.auth import ADMIN_USER, Principal, hash_token, new_token
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import audit
from shoal.server.services import jobs as job_service
from shoal.store.models import Job, Token, User

ACTIVE_JOB_STATES = ("WAITING", "RUNNING", "STOPPING")

USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SCRYPT = {"n": 2**14, "r": 8, "p": 1}


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, **SCRYPT)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()


def check_password(password: str, stored: str | None) -> bool:
    if not stored or not stored.startswith("scrypt$"):
        return False
    _, salt, digest = stored.split("$")
    candidate = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), **SCRYPT)
    return hmac.compare_digest(candidate, base64.b64decode(digest))


def manages_others(caller: Principal) -> bool:
    """Whether the caller manages other users (an admin, with a user token)."""
    return caller.is_admin and caller.kind == "user"


def require_admin(caller: Principal) -> None:
    if not manages_others(caller):
        raise ApiError(403, "ForbiddenUserError", "only admins (with a user token) may do this")


def create_user(ctx: ServerContext, caller: Principal, body: UserIn) -> tuple[UserOut, str]:
    require_admin(caller)
    check_new_user(body)
    now = ctx.clock()
    token = new_token("shoal")
    with ctx.db.write() as session:
        user = add_user(session, body, now)
        session.add(
            Token(
                user_id=user.id,
                token_hash=hash_token(token),
                kind="user",
                label="first token",
                created_at=now,
            )
        )
        detail = {"admin": body.admin, "groups": list(body.groups)}
        audit.record(session, now, caller, "user.create", f"user {body.name}", detail)
    return UserOut(name=body.name, admin=body.admin, groups=list(body.groups)), token


def check_new_user(body: UserIn) -> None:
    if not USER_NAME.match(body.name):
        raise ApiError(
            400, "InvalidParametersError", "user names are 1-64 letters, digits, '_', '.' or '-'"
        )
    check_password_rule(body.password)


def add_user(
    session: Session,
    body: UserIn,
    now: float,
    email: str = "",
    extension: dict[str, Any] | None = None,
) -> User:
    """The new user's row (flushed, so it has its id); 409 if the name is taken."""
    if session.scalar(select(User).where(User.name == body.name)) is not None:
        raise ApiError(409, "ConflictUserError", f"user {body.name} already exists")
    user = User(
        name=body.name,
        is_admin=body.admin,
        groups=list(body.groups),
        created_at=now,
        password_hash=None if body.password is None else hash_password(body.password),
        email=email,
        extension=dict(extension or {}),
    )
    session.add(user)
    session.flush()
    return user


def list_users(ctx: ServerContext, caller: Principal) -> list[UserOut]:
    require_admin(caller)
    with ctx.db.read() as session:
        return [
            UserOut(name=u.name, admin=u.is_admin, groups=list(u.groups))
            for u in session.scalars(select(User).order_by(User.name))
        ]


def check_password_rule(password: str | None) -> None:
    if password is not None and len(password) < 6:
        raise ApiError(
            400,
            "InvalidParametersError",
            "password: at least 6 characters; choose a longer one",
            [{"path": "password", "message": "at least 6 characters"}],
        )


def _user_settings(user: User) -> dict[str, object]:
    """What ``user update`` shows: never the password, only whether one is set."""
    return {
        "admin": user.is_admin,
        "groups": list(user.groups),
        "password": "set" if user.password_hash else "none",
    }


def patch_user(
    ctx: ServerContext, caller: Principal, name: str, body: UserPatch, dry_run: bool = False
) -> ChangeResult:
    """Change only the settings given; ``password: null`` removes the password."""
    require_admin(caller)
    fields = body.model_fields_set
    if "admin" in fields and body.admin is None:
        raise ApiError(
            400, "InvalidParametersError", "admin is true or false; null cannot clear it"
        )
    if body.admin is False and name in (ADMIN_USER, caller.user):
        raise ApiError(
            400,
            "InvalidParametersError",
            f"admin: user {name} keeps admin rights (the built-in admin and yourself always do); "
            "ask another admin",
        )
    check_password_rule(body.password)
    session_of = ctx.db.read if dry_run else ctx.db.write
    with session_of() as session:
        user = session.scalar(select(User).where(User.name == name))
        if user is None:
            raise ApiError(404, "NoUserError", f"no user {name!r}; see `shoal user list`")
        before = _user_settings(user)
        after = dict(before)
        if "admin" in fields:
            after["admin"] = bool(body.admin)
        if "groups" in fields:
            after["groups"] = [g for g in dict.fromkeys(body.groups or []) if g]
        if "password" in fields:
            after["password"] = "none" if body.password is None else "changed"
        changes = [
            FieldChange(field=k, before=before[k], after=after[k])
            for k in before
            if before[k] != after[k]
        ]
        if not dry_run:
            user.is_admin = bool(after["admin"])
            user.groups = list(after["groups"])  # type: ignore[call-overload]
            if "password" in fields:
                user.password_hash = None if body.password is None else hash_password(body.password)
            if changes:
                detail = {"changes": [c.model_dump() for c in changes]}
                audit.record(session, ctx.clock(), caller, "user.update", f"user {name}", detail)
    return ChangeResult(name=name, dryRun=dry_run, before=before, after=after, changes=changes)


def delete_user(
    ctx: ServerContext, caller: Principal, name: str, stop_jobs: bool = False
) -> list[str]:
    """Delete a user and revoke their tokens; returns the jobs stopped. Their active jobs block
    it (409) unless ``stop_jobs``. Finished jobs stay listed under the user's name."""
    require_admin(caller)
    if name in (ADMIN_USER, caller.user):
        raise ApiError(400, "InvalidParametersError", f"user {name} cannot be deleted")
    with ctx.db.write() as session:
        user = session.scalar(select(User).where(User.name == name))
        if user is None:
            raise ApiError(404, "NoUserError", f"no user {name!r}; see `shoal user list`")
        active = [row.id for row in session.execute(_active_jobs(name))]
        if active and not stop_jobs:
            raise _has_active_jobs(session, name)
        for token in session.scalars(select(Token).where(Token.user_id == user.id)):
            token.revoked_at = token.revoked_at or ctx.clock()
        detail = {"stoppedJobs": active}
        audit.record(session, ctx.clock(), caller, "user.delete", f"user {name}", detail)
        if not active:
            session.delete(user)
    if not active:
        return []
    # Their tokens are revoked, so no new job can come; stop the active ones, then delete.
    for job_id in active:
        job_service.stop(ctx, caller, job_id)
    with ctx.db.write() as session:
        user = session.scalar(select(User).where(User.name == name))
        if user is not None:
            session.delete(user)
    return active


def _has_active_jobs(session: Session, name: str) -> ApiError:
    active = list(session.execute(_active_jobs(name)))
    listed = ", ".join(f"{j.id} ({j.name}, {j.state})" for j in active[:10])
    more = f" and {len(active) - 10} more" if len(active) > 10 else ""
    return ApiError(
        409,
        "ConflictUserError",
        f"user {name} has {len(active)} active job(s): {listed}{more}; stop them first, "
        "or delete with --stop-jobs (API: ?stopJobs=true)",
        [{"path": "jobs", "message": f"job {j.id} is {j.state}"} for j in active],
    )


def _active_jobs(name: str) -> Select[str, str, str]:
    return (
        select(Job.id, Job.name, Job.state)
        .where(Job.user == name, Job.state.in_(ACTIVE_JOB_STATES), Job.array_job_id.is_(None))
        .order_by(Job.seq)
    )


def create_token(
    ctx: ServerContext, caller: Principal, label: str, expires_in_s: float | None, application: bool
) -> tuple[TokenOut, str]:
    if caller.kind != "user":
        raise ApiError(403, "ForbiddenUserError", "only user tokens may create tokens")
    with ctx.db.write() as session:
        user = session.scalar(select(User).where(User.name == caller.user))
        assert user is not None
        kind = "application" if application else "user"
        row, token = add_token(session, user, kind, label, ctx.clock(), expires_in_s)
        session.flush()
        out = _token_out(row, caller.user)
        detail = {"kind": kind, "label": label, "expiresAt": row.expires_at}
        audit.record(session, ctx.clock(), caller, "token.create", f"token {row.id}", detail)
    return out, token


def add_token(
    session: Session, user: User, kind: str, label: str, now: float, expires_in_s: float | None
) -> tuple[Token, str]:
    """A new token of ``user``'s, added to ``session``: its row, and its value (shown once;
    only its hash is stored)."""
    token = new_token("shoal")
    row = Token(
        user_id=user.id,
        token_hash=hash_token(token),
        kind=kind,
        label=label,
        created_at=now,
        expires_at=None if expires_in_s is None else now + expires_in_s,
    )
    session.add(row)
    return row, token


def login(
    ctx: ServerContext, name: str, password: str, expires_in_s: float, label: str = "login"
) -> tuple[str, bool]:
    """A user token for ``expires_in_s`` seconds; 400 ``NoUserError`` or ``IncorrectPasswordError``
    otherwise, as OpenPAI's basic login answers."""
    with ctx.db.read() as session:
        user = session.scalar(select(User).where(User.name == name))
    if user is None:
        audit.record_refusal(ctx, name, "login", f"user {name}", "NoUserError")
        raise ApiError(400, "NoUserError", f"User {name} is not found.")
    if not check_password(password, user.password_hash):
        audit.record_refusal(ctx, name, "login", f"user {name}", "IncorrectPasswordError")
        hint = "" if user.password_hash else f" (user {name} has no password: an admin sets one)"
        raise ApiError(400, "IncorrectPasswordError", f"Password is incorrect.{hint}")
    with ctx.db.write() as session:
        row, token = add_token(session, user, "user", label, ctx.clock(), expires_in_s)
        session.flush()
        detail = {"method": "password", "label": label, "tokenId": row.id}
        audit.record(session, ctx.clock(), name, "login", f"user {name}", detail)
    return token, user.is_admin


def list_tokens(ctx: ServerContext, caller: Principal) -> list[TokenOut]:
    with ctx.db.read() as session:
        query = select(Token, User).join(User, User.id == Token.user_id).order_by(Token.id)
        if not caller.is_admin:
            query = query.where(User.name == caller.user)
        return [_token_out(t, u.name) for t, u in session.execute(query)]


def revoke_token(ctx: ServerContext, caller: Principal, token_id: int) -> None:
    with ctx.db.write() as session:
        row = session.execute(
            select(Token, User).join(User, User.id == Token.user_id).where(Token.id == token_id)
        ).first()
        if row is None or not (caller.is_admin or row[1].name == caller.user):
            raise ApiError(404, "NoTokenError", f"no token {token_id}")
        row[0].revoked_at = row[0].revoked_at or ctx.clock()
        detail = {"owner": row[1].name, "label": row[0].label}
        audit.record(session, ctx.clock(), caller, "token.revoke", f"token {token_id}", detail)


def _token_out(token: Token, user: str) -> TokenOut:
    return TokenOut(
        id=token.id,
        user=user,
        kind=token.kind,
        label=token.label,
        createdAt=token.created_at,
        expiresAt=token.expires_at,
        revoked=token.revoked_at is not None,
    )


# ---- tokens as OpenPAI names them (/api/v2/tokens) ----

TOKEN_REFERENCE = "shoal-token-"  # + the token's id; a real token starts with "shoal_"
PERSONAL_KINDS = ("user", "application")


def token_references(ctx: ServerContext, caller: Principal) -> list[str]:
    """The caller's live user and application tokens, by reference: their values are kept only
    as hashes, so what a list can show is ``shoal-token-<id>``, which revoking accepts."""
    now = ctx.clock()
    with ctx.db.read() as session:
        rows = session.scalars(
            select(Token.id)
            .join(User, User.id == Token.user_id)
            .where(User.name == caller.user, Token.kind.in_(PERSONAL_KINDS))
            .where(Token.revoked_at.is_(None))
            .where((Token.expires_at.is_(None)) | (Token.expires_at > now))
            .order_by(Token.id)
        )
        return [f"{TOKEN_REFERENCE}{token_id}" for token_id in rows]


def revoke_reference(ctx: ServerContext, caller: Principal, reference: str) -> None:
    """Revoke a user or application token named by ``shoal-token-<id>`` or by its value: the
    caller's own, or anyone's for an admin. 403 for any other (unknown ones too, so a refusal
    does not say whether a token exists)."""
    if caller.kind != "user":
        raise ApiError(
            403, "ForbiddenUserError", "Applications are not allowed to do this operation."
        )
    token_id = reference.removeprefix(TOKEN_REFERENCE)
    if token_id != reference and token_id.isdigit():
        condition = Token.id == int(token_id)
    else:
        condition = Token.token_hash == hash_token(reference)
    with ctx.db.write() as session:
        row = session.execute(
            select(Token, User).join(User, User.id == Token.user_id).where(condition)
        ).first()
        if (
            row is None
            or row[0].kind not in PERSONAL_KINDS
            or not (manages_others(caller) or row[1].name == caller.user)
        ):
            raise ApiError(
                403,
                "ForbiddenUserError",
                f"token {_shown(reference)} is not one of yours; GET /api/v2/tokens lists them",
            )
        row[0].revoked_at = row[0].revoked_at or ctx.clock()
        detail = {"owner": row[1].name, "label": row[0].label}
        audit.record(session, ctx.clock(), caller, "token.revoke", f"token {row[0].id}", detail)


def revoke_presented(ctx: ServerContext, caller: Principal, token: str) -> None:
    """Log out: revoke the token this request came with (a user token; 403 for others)."""
    if caller.kind != "user":
        raise ApiError(
            403,
            "ForbiddenUserError",
            "Applications are not allowed to do this operation; the token's user revokes it "
            "(DELETE /api/v2/tokens/{token})",
        )
    with ctx.db.write() as session:
        row = session.scalar(select(Token).where(Token.token_hash == hash_token(token)))
        if row is not None:
            row.revoked_at = row.revoked_at or ctx.clock()
            audit.record(session, ctx.clock(), caller, "logout", f"token {row.id}")


def _shown(reference: str) -> str:
    """A reference as a message may repeat it; never any part of a token's value."""
    return reference if reference.startswith(TOKEN_REFERENCE) else "(the value given)"
