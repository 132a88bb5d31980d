"""Users, groups and API tokens. Tokens are random secrets stored only as SHA-256 hashes; a user
sees, stops and reads the logs of their own jobs only, unless admin."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

from sqlalchemy import select

from shoal.server.auth import ADMIN_USER, Principal, hash_token, new_token
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import TokenOut, UserIn, UserOut
from shoal.store.models import Token, User

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


def require_admin(caller: Principal) -> None:
    if not caller.is_admin or caller.kind != "user":
        raise ApiError(403, "ForbiddenUserError", "only admins (with a user token) may do this")


def create_user(ctx: ServerContext, caller: Principal, body: UserIn) -> tuple[UserOut, str]:
    require_admin(caller)
    if not USER_NAME.match(body.name):
        raise ApiError(
            400, "InvalidParametersError", "user names are 1-64 letters, digits, '_', '.' or '-'"
        )
    if body.password is not None and len(body.password) < 6:
        raise ApiError(400, "InvalidParametersError", "passwords have at least 6 characters")
    now = ctx.clock()
    token = new_token("shoal")
    with ctx.db.write() as session:
        if session.scalar(select(User).where(User.name == body.name)) is not None:
            raise ApiError(409, "ConflictUserError", f"user {body.name} already exists")
        user = User(
            name=body.name,
            is_admin=body.admin,
            groups=list(body.groups),
            created_at=now,
            password_hash=None if body.password is None else hash_password(body.password),
        )
        session.add(user)
        session.flush()
        session.add(
            Token(
                user_id=user.id,
                token_hash=hash_token(token),
                kind="user",
                label="first token",
                created_at=now,
            )
        )
    return UserOut(name=body.name, admin=body.admin, groups=list(body.groups)), token


def list_users(ctx: ServerContext, caller: Principal) -> list[UserOut]:
    require_admin(caller)
    with ctx.db.read() as session:
        return [
            UserOut(name=u.name, admin=u.is_admin, groups=list(u.groups))
            for u in session.scalars(select(User).order_by(User.name))
        ]


def delete_user(ctx: ServerContext, caller: Principal, name: str) -> None:
    require_admin(caller)
    if name in (ADMIN_USER, caller.user):
        raise ApiError(400, "InvalidParametersError", f"user {name} cannot be deleted")
    with ctx.db.write() as session:
        user = session.scalar(select(User).where(User.name == name))
        if user is None:
            raise ApiError(404, "NoUserError", f"no user {name!r}")
        for token in session.scalars(select(Token).where(Token.user_id == user.id)):
            token.revoked_at = ctx.clock()
        session.delete(user)


def create_token(
    ctx: ServerContext, caller: Principal, label: str, expires_in_s: float | None, application: bool
) -> tuple[TokenOut, str]:
    if caller.kind != "user":
        raise ApiError(403, "ForbiddenUserError", "only user tokens may create tokens")
    now = ctx.clock()
    token = new_token("shoal")
    with ctx.db.write() as session:
        user = session.scalar(select(User).where(User.name == caller.user))
        assert user is not None
        row = Token(
            user_id=user.id,
            token_hash=hash_token(token),
            kind="application" if application else "user",
            label=label,
            created_at=now,
            expires_at=None if expires_in_s is None else now + expires_in_s,
        )
        session.add(row)
        session.flush()
        out = _token_out(row, caller.user)
    return out, token


def login(ctx: ServerContext, name: str, password: str, expires_in_s: float) -> tuple[str, bool]:
    with ctx.db.read() as session:
        user = session.scalar(select(User).where(User.name == name))
    if user is None or not check_password(password, user.password_hash):
        raise ApiError(401, "IncorrectPasswordError", "unknown user or wrong password")
    now = ctx.clock()
    token = new_token("shoal")
    with ctx.db.write() as session:
        session.add(
            Token(
                user_id=user.id,
                token_hash=hash_token(token),
                kind="user",
                label="login",
                created_at=now,
                expires_at=now + expires_in_s,
            )
        )
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
