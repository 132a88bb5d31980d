"""Bearer tokens: random secrets, stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from shoal.store.db import Database
from shoal.store.models import Token, User

ADMIN_USER = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    is_admin: bool
    kind: str  # user | application | agent
    groups: tuple[str, ...] = ()


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
    token = new_token("shoal" if kind != "agent" else "shoal_agent")
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


def authenticate(db: Database, token: str, now: float) -> Principal | None:
    with db.read() as session:
        row = session.execute(
            select(Token, User)
            .join(User, User.id == Token.user_id)
            .where(Token.token_hash == hash_token(token))
        ).first()
    if row is None:
        return None
    found, user = row
    if found.revoked_at is not None or (found.expires_at is not None and found.expires_at <= now):
        return None
    return Principal(user.name, user.is_admin, found.kind, tuple(user.groups or ()))
