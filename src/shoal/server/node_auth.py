"""Node certificates as credentials: who a verified client certificate is, and what it may do.

TLS has already checked that the certificate was signed by the cluster's CA (``server.tls``);
this module checks that it is still a node's: its serial and fingerprint must be the ones the
server recorded at join, not revoked by ``shoal node remove``. Answers are cached with the
tokens' (``auth.TokenCache``, emptied by any change to a node certificate), so a request costs
no query.
A node credential acts only for its own node (``require_own``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import lru_cache

from sqlalchemy import bindparam, select

from shoal.pki import certificate_identity
from shoal.protocol import NODE_REMOVED_CODE, UNKNOWN_NODE_CERT_CODE
from shoal.server.auth import Principal, _Known, token_cache
from shoal.server.context import ApiError, ServerContext
from shoal.store.db import Database
from shoal.store.models import NodeCertRow, Task

FORBIDDEN_NODE = "ForbiddenNodeError"


@lru_cache(maxsize=4096)
def _identity(pem: str) -> tuple[str, str, str]:
    return certificate_identity(pem)


def removed_message(node: str) -> str:
    return (
        f"node {node} was removed; join again with a new token (`shoal node token create` on "
        "the server, then `shoal agent join`)"
    )


def authenticate_node(db: Database, pem: str) -> Principal:
    """The node a verified client certificate belongs to; 403 if it was revoked or unknown."""
    serial, common_name, fingerprint = _identity(pem)
    cache = token_cache(db)
    key = f"cert:{fingerprint}"
    known = cache.get(key)
    if known is None:
        generation = cache.generation
        known = _look_up(db, serial, common_name, fingerprint)
        cache.put(key, known, generation)
    return _answer(known)


def cached_node(db: Database, pem: str) -> Principal | None:
    """``authenticate_node``'s answer when it needs no query (on the event loop: most requests,
    since an agent reports every few seconds); None: look it up (in a worker thread)."""
    known = token_cache(db).get(f"cert:{_identity(pem)[2]}")
    return None if known is None else _answer(known)


def _answer(known: _Known) -> Principal:
    if known.principal is None:
        code, message = known.refusal or (UNKNOWN_NODE_CERT_CODE, "unknown certificate")
        raise ApiError(403, code, message)
    return known.principal


def _look_up(db: Database, serial: str, common_name: str, fingerprint: str) -> _Known:
    """By serial, and the whole certificate must be the one recorded (its fingerprint)."""
    with db.read() as session:
        row = session.get(NodeCertRow, serial)
    now = time.monotonic()
    if row is None or row.fingerprint != fingerprint:
        message = (
            f"the certificate of {common_name!r} (serial {serial}) was not issued to a node of "
            "this server; join with a token from `shoal node token create`"
        )
        return _Known(None, None, now, (UNKNOWN_NODE_CERT_CODE, message))
    if row.revoked_at is not None:
        return _Known(None, None, now, (NODE_REMOVED_CODE, removed_message(row.node)))
    principal = Principal(user=f"node:{row.node}", is_admin=False, kind="node", node=row.node)
    return _Known(principal, row.expires_at, now)


def _refuse(own: str, other: str, what: str) -> ApiError:
    return ApiError(
        403,
        FORBIDDEN_NODE,
        f"the certificate of node {own} cannot act for node {other} ({what}); a node credential "
        "acts only for its own node",
    )


_TASK_NODES = select(Task.id, Task.node).where(Task.id.in_(bindparam("ids", expanding=True)))


def require_own(
    ctx: ServerContext,
    principal: Principal,
    nodes: Iterable[str] = (),
    attempts: Iterable[str] = (),
    what: str = "this request",
) -> None:
    """A node credential may name only its own node, and attempts placed on it."""
    own = principal.node
    if own is None:  # a bearer credential (local mode): no node identity to check
        return
    for node in nodes:
        if node != own:
            raise _refuse(own, node, what)
    ids = sorted({int(a.partition(".")[0]) for a in attempts if a.partition(".")[0].isdigit()})
    if not ids:
        return
    with ctx.db.read() as session:
        for row in session.connection().execute(_TASK_NODES, {"ids": ids}):
            if row.node != own:
                raise _refuse(own, row.node, f"{what} of task {row.id}")


def require_job_on_node(ctx: ServerContext, principal: Principal, job_id: str) -> None:
    """A node may fetch the code of a job only if the job has a task placed on it."""
    if principal.node is None:
        return
    with ctx.db.read() as session:
        placed = session.scalar(
            select(Task.id).where(Task.job_id == job_id, Task.node == principal.node).limit(1)
        )
    if placed is None:
        raise ApiError(
            403,
            FORBIDDEN_NODE,
            f"job {job_id} has no task placed on node {principal.node}; a node fetches only the "
            "code of its own tasks",
        )
