"""Dashboard sessions: signing in with a token or a user and password, and signing out.

A session is a user token of its own (label ``web session``, 12 hours), sent back as an HttpOnly
cookie; the token the user signed in with is never put in a cookie, so signing out revokes only
the session. State-changing calls made with the cookie must carry the session's CSRF token in the
``X-Shoal-CSRF`` header (``server/deps.py``): a digest of the session token, which a page from
another site can neither read (the cookie is HttpOnly and SameSite=Strict) nor compute."""

from __future__ import annotations

import hashlib
import hmac

from sqlalchemy import select

from shoal.server.auth import Principal, authenticate, hash_token
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import audit, users
from shoal.store.models import Token, User

SESSION_COOKIE = "shoal_session"
CSRF_HEADER = "X-Shoal-CSRF"
SESSION_S = 12 * 3600.0
SESSION_LABEL = "web session"


def csrf_token(session_token: str) -> str:
    return hashlib.sha256(b"shoal-csrf\0" + session_token.encode()).hexdigest()[:40]


def csrf_matches(presented: str | None, session_token: str) -> bool:
    # bytes: compare_digest refuses str with non-ASCII characters (a header may carry them)
    return presented is not None and hmac.compare_digest(
        presented.encode(), csrf_token(session_token).encode()
    )


def sign_in_with_password(ctx: ServerContext, name: str, password: str) -> tuple[str, bool]:
    """A session for ``name``: 400 ``NoUserError`` / ``IncorrectPasswordError`` as OpenPAI's
    basic login answers."""
    return users.login(ctx, name, password, SESSION_S, label=SESSION_LABEL)


def sign_in_with_token(ctx: ServerContext, token: str) -> tuple[str, Principal]:
    """A session for the user the token belongs to; agent tokens cannot sign in."""
    now = ctx.clock()
    principal = authenticate(ctx.db, token, now)
    if principal is None:
        raise ApiError(
            401,
            "UnauthorizedUserError",
            "token: unknown, revoked or expired; `shoal token create` (or `cat` the token file "
            "`shoal up` wrote) gives a valid one",
        )
    if principal.kind not in ("user", "application"):
        raise ApiError(
            403,
            "ForbiddenUserError",
            f"token: a {principal.kind} token cannot sign in to the dashboard; use a user's token",
        )
    with ctx.db.write() as session:
        user = session.scalar(select(User).where(User.name == principal.user))
        if user is None:  # deleted between the two reads
            raise ApiError(401, "UnauthorizedUserError", f"user {principal.user} no longer exists")
        row, session_token = users.add_token(session, user, "user", SESSION_LABEL, now, SESSION_S)
        session.flush()
        detail = {"method": "token", "label": SESSION_LABEL, "tokenId": row.id}
        audit.record(session, now, principal, "login", f"user {principal.user}", detail)
    return session_token, principal


def sign_out(ctx: ServerContext, session_token: str) -> None:
    """Revoke the session's token (idempotent: an unknown or revoked one is left alone)."""
    with ctx.db.write() as session:
        row = session.scalar(select(Token).where(Token.token_hash == hash_token(session_token)))
        if row is not None and row.label == SESSION_LABEL and row.revoked_at is None:
            row.revoked_at = ctx.clock()
            user = session.get(User, row.user_id)
            actor = user.name if user is not None else audit.NOBODY
            audit.record(session, ctx.clock(), actor, "logout", f"token {row.id}")
