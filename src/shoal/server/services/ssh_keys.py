"""Users' SSH public keys (``shoal user key add|list|rm``; docs/ssh.md): checked, named, listed
and removed. The keys of a job's user are installed in the tasks of the jobs they submit with
OpenPAI's ``ssh`` plugin (``services.job_ssh``), together with the keys OpenPAI's web portal kept
in the user's ``extension.sshKeys`` (``[{title, value, time}]``)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct

from pydantic import BaseModel
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.store.models import SshKeyRow, User

KEY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
MAX_KEYS_PER_USER = 100
MAX_KEY_CHARS = 16_384  # an RSA 16384-bit key line is under 3,000 characters
KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)


class SshKeyIn(BaseModel):
    public_key: str
    name: str | None = None  # None: the key's comment if it makes a name, else from its fingerprint


class SshKeyOut(BaseModel):
    name: str
    public_key: str
    fingerprint: str
    created_at: float


def parsed_key(text: str) -> tuple[str, str, str]:
    """``(key line, fingerprint, comment)`` of one OpenSSH public key line; a 400 saying what is
    wrong otherwise. The key's type must be one OpenSSH's sshd accepts and match its encoding."""
    line = text.strip()
    if not line or "\n" in line or len(line) > MAX_KEY_CHARS:
        raise ApiError(
            400,
            "InvalidSshKey",
            "public_key: give one public key line, as in ~/.ssh/id_ed25519.pub",
        )
    parts = line.split(None, 2)
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        found = parts[0][:40] if parts else ""
        raise ApiError(
            400,
            "InvalidSshKey",
            f"public_key: {found!r} is not a public key type; the line starts with one of "
            f"{', '.join(KEY_TYPES[:3])}, ... (a private key is never sent)",
        )
    try:
        blob = base64.b64decode(parts[1], validate=True)
        (length,) = struct.unpack(">I", blob[:4])
        encoded_type = blob[4 : 4 + length].decode("ascii")
    except (binascii.Error, struct.error, UnicodeDecodeError):
        encoded_type = ""
    if encoded_type != parts[0]:
        raise ApiError(
            400,
            "InvalidSshKey",
            f"public_key: the key data is not a {parts[0]} key (damaged or cut when copied?)",
        )
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    comment = parts[2].strip() if len(parts) > 2 else ""
    return " ".join(parts), f"SHA256:{digest}", comment


def _name_for(wanted: str | None, comment: str, fingerprint: str) -> str:
    if wanted is not None:
        if not KEY_NAME_RE.match(wanted):
            raise ApiError(
                400,
                "InvalidSshKeyName",
                f"name: {wanted!r} is not a key name; use up to 64 letters, digits and '_.@-', "
                "starting with a letter or digit",
            )
        return wanted
    if KEY_NAME_RE.match(comment):
        return comment
    cleaned = re.sub(r"[^A-Za-z0-9]", "", fingerprint.removeprefix("SHA256:"))
    return f"key-{cleaned[:12]}"


def _owner(principal: Principal, user: str | None) -> str:
    """Whose keys: the caller's own; another user's only for admins."""
    if user is None or user == principal.user:
        return principal.user
    if not principal.is_admin:
        raise ApiError(
            403,
            "ForbiddenUserError",
            f"only admins manage other users' SSH keys (you are {principal.user}, not {user})",
        )
    return user


def add_key(
    ctx: ServerContext, principal: Principal, body: SshKeyIn, user: str | None
) -> SshKeyOut:
    owner = _owner(principal, user)
    line, fingerprint, comment = parsed_key(body.public_key)
    name = _name_for(body.name, comment, fingerprint)
    now = ctx.clock()
    with ctx.db.write() as session:
        if session.scalar(select(User.id).where(User.name == owner)) is None:
            raise ApiError(404, "NoUserError", f"user {owner} does not exist")
        held = list(session.scalars(select(SshKeyRow).where(SshKeyRow.user == owner)))
        for row in held:
            if row.name == name:
                raise ApiError(
                    409,
                    "ConflictSshKeyError",
                    f"{owner} already has a key named {name}: remove it first "
                    f"(`shoal user key rm {name}`) or give another --name",
                )
            if row.fingerprint == fingerprint:
                raise ApiError(
                    409,
                    "ConflictSshKeyError",
                    f"{owner} has registered this key already, as {row.name}",
                )
        if len(held) >= MAX_KEYS_PER_USER:
            raise ApiError(
                409,
                "TooManySshKeys",
                f"{owner} has {len(held)} keys, the most a user may have; remove one first",
            )
        row = SshKeyRow(
            user=owner, name=name, public_key=line, fingerprint=fingerprint, created_at=now
        )
        session.add(row)
    return SshKeyOut(name=name, public_key=line, fingerprint=fingerprint, created_at=now)


def list_keys(ctx: ServerContext, principal: Principal, user: str | None) -> list[SshKeyOut]:
    owner = _owner(principal, user)
    with ctx.db.read() as session:
        rows = session.scalars(
            select(SshKeyRow).where(SshKeyRow.user == owner).order_by(SshKeyRow.created_at)
        )
        return [
            SshKeyOut(
                name=r.name,
                public_key=r.public_key,
                fingerprint=r.fingerprint,
                created_at=r.created_at,
            )
            for r in rows
        ]


def remove_key(ctx: ServerContext, principal: Principal, name: str, user: str | None) -> None:
    owner = _owner(principal, user)
    with ctx.db.write() as session:
        gone = session.execute(
            delete(SshKeyRow).where(SshKeyRow.user == owner, SshKeyRow.name == name)
        )
        if not gone.rowcount:  # type: ignore[attr-defined]
            raise ApiError(
                404,
                "NoSshKeyError",
                f"{owner} has no SSH key named {name} (`shoal user key list` shows them)",
            )


def authorized_keys(session: Session, user: str) -> list[str]:
    """Every key that may log in to the user's tasks: registered ones, then OpenPAI's
    ``extension.sshKeys`` values that are key lines."""
    keys = list(
        session.scalars(
            select(SshKeyRow.public_key)
            .where(SshKeyRow.user == user)
            .order_by(SshKeyRow.created_at)
        )
    )
    extension = session.scalar(select(User.extension).where(User.name == user)) or {}
    listed = extension.get("sshKeys") if isinstance(extension, dict) else None
    for item in listed if isinstance(listed, list) else []:
        value = item.get("value") if isinstance(item, dict) else None
        if isinstance(value, str):
            try:
                keys.append(parsed_key(value)[0])
            except ApiError:
                continue  # not a key line: nothing to install
    return list(dict.fromkeys(keys))
