"""Bearer tokens: random secrets, stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time
import weakref
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from shoal.store.db import Database
from shoal.store.models import NodeCertRow, Token, User

ADMIN_USER = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    is_admin: bool
    kind: str  # user | application | agent | kubernetes (its agent) | node (a node certificate)
    groups: tuple[str, ...] = ()
    node: str | None = None  # the node a node certificate names
    token_id: int | None = None  # the token it presented (the audit log's new-client check)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def write_secret_file(path: Path, value: str) -> None:
    """Write ``value`` to a file only its owner can read (mode 0600 from the start)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    os.chmod(path, 0o600)


def ensure_token_file(db: Database, path: Path, kind: str, now: float) -> str:
    """Reuse the token in ``path`` if the store knows it, else mint one for the admin user."""
    if path.exists():
        token = path.read_text().strip()
        with db.read() as session:
            known = session.scalar(select(Token).where(Token.token_hash == hash_token(token)))
        if known is not None and known.revoked_at is None:
            return token
    token = new_token("shoal_agent" if kind in ("agent", "kubernetes") else "shoal")
    with db.write() as session:
        admin = session.scalar(select(User).where(User.name == ADMIN_USER))
        if admin is None:
            admin = User(name=ADMIN_USER, is_admin=True, created_at=now)
            session.add(admin)
            session.flush()
        session.add(
            Token(
                user_id=admin.id,
                token_hash=hash_token(token),
                kind=kind,
                label=f"{kind} token written to {path.name}",
                created_at=now,
            )
        )
    write_secret_file(path, token)
    return token


@dataclass(frozen=True, slots=True)
class _Known:
    principal: Principal | None  # None: revoked or unknown (looked up, never kept)
    expires_at: float | None
    cached_at: float
    refusal: tuple[str, str] | None = None  # (code, message) of a refused node certificate


class TokenCache:
    """Tokens (and node certificates, ``node_auth``) already looked up, so a request costs no
    query for its credential.

    Any flush or commit that touches a token, a user or a node certificate (revocation, deletion,
    new groups, a node removed) empties
    the cache; a lookup that raced with such a write is not stored. Entries also age out after
    ``TTL_S``, for the rare change made outside this process."""

    TTL_S = 30.0

    def __init__(self, db: Database) -> None:
        self._entries: dict[str, _Known] = {}
        self._lock = threading.Lock()
        self.generation = 0
        event.listen(db.sessions, "after_flush", self._after_flush)
        event.listen(db.sessions, "after_commit", self._after_commit)

    def _after_flush(self, session: Session, _context: Any) -> None:
        touched = chain(session.new, session.dirty, session.deleted)
        if any(isinstance(row, (Token, User, NodeCertRow)) for row in touched):
            session.info["auth_changed"] = True
            self.clear()

    def _after_commit(self, session: Session) -> None:
        if session.info.pop("auth_changed", False):
            self.clear()

    def clear(self) -> None:
        with self._lock:
            self.generation += 1
            self._entries.clear()

    def get(self, token_hash: str) -> _Known | None:
        known = self._entries.get(token_hash)
        if known is None or time.monotonic() - known.cached_at > self.TTL_S:
            return None
        return known

    def put(self, token_hash: str, known: _Known, generation: int) -> None:
        with self._lock:
            if generation == self.generation:
                self._entries[token_hash] = known


_caches: weakref.WeakKeyDictionary[Database, TokenCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def token_cache(db: Database) -> TokenCache:
    with _caches_lock:
        cache = _caches.get(db)
        if cache is None:
            cache = _caches[db] = TokenCache(db)
        return cache


def cached_principal(db: Database, token: str, now: float) -> tuple[bool, Principal | None]:
    """``(True, principal or None)`` when the token's answer is known without a query (a fresh
    cache entry); ``(False, None)`` when ``authenticate`` has to look it up. The API checks here
    first on the event loop, and only sends a miss to a worker thread."""
    known = token_cache(db).get(hash_token(token))
    if known is None:
        return False, None
    if known.principal is None or (known.expires_at is not None and known.expires_at <= now):
        return True, None
    return True, known.principal


async def look_up_token(db: Database, token: str, now: float) -> Principal | None:
    """The token's principal (None: unknown, revoked or expired) for an async caller: from the
    cache on the event loop, else looked up in a worker thread (``authenticate``)."""
    known, principal = cached_principal(db, token, now)
    if known:
        return principal
    return await run_in_threadpool(authenticate, db, token, now)


def authenticate(db: Database, token: str, now: float) -> Principal | None:
    cache = token_cache(db)
    token_hash = hash_token(token)
    known = cache.get(token_hash)
    if known is None:
        generation = cache.generation
        known = _look_up(db, token_hash)
        if known.principal is not None:  # unknown tokens are not kept (a flood would grow it)
            cache.put(token_hash, known, generation)
    if known.principal is None or (known.expires_at is not None and known.expires_at <= now):
        return None
    return known.principal


def _look_up(db: Database, token_hash: str) -> _Known:
    with db.read() as session:
        row = session.execute(
            select(Token, User)
            .join(User, User.id == Token.user_id)
            .where(Token.token_hash == token_hash)
        ).first()
    if row is None or row[0].revoked_at is not None:
        return _Known(None, None, time.monotonic())
    found, user = row
    principal = Principal(
        user.name, user.is_admin, found.kind, tuple(user.groups or ()), token_id=found.id
    )
    return _Known(principal, found.expires_at, time.monotonic())
