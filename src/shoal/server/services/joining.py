"""Joining a server on the network: join tokens, signing a node's certificate at join, and
removing a node (its certificates revoked). Renewing a node's certificate and rotating the CA:
``certificates``.

A join token is refused, with its own code, when unknown or its secret is wrong
(``JoinTokenUnknown``, 401), revoked (``JoinTokenRevoked``), expired (``JoinTokenExpired``) or
used up (``JoinTokenUsedUp``, all 403). A use is counted in the transaction that records the
node's certificate, so a token of N uses signs at most N certificates."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from sqlalchemy import func, select, update

from shoal.core.lifecycle import ProcessExit
from shoal.core.nodestates import Hold, Liveness, NodeEvent
from shoal.pki import NODE_NAME_HINT, NODE_NAME_PATTERN, JoinToken, secret_hash
from shoal.protocol import JoinRequest, JoinResponse
from shoal.server.auth import Principal
from shoal.server.ca import CertificateRequestError, PkiFiles, sign_node_csr
from shoal.server.context import ApiError, ServerContext
from shoal.server.notify import noted_news
from shoal.server.services import audit
from shoal.server.services.lifecycle import on_exit
from shoal.server.services.node_life import change_node, record_node_event
from shoal.server.services.nodes import HOLDING
from shoal.server.services.users import require_admin
from shoal.store.models import JoinTokenRow, Node, NodeCertRow, Task

LABEL_KEY_HINT = "letters, digits, '.', '_', '/' and '-'"


def pki_of(ctx: ServerContext) -> PkiFiles:
    if not ctx.settings.tls:
        raise ApiError(
            409,
            "NotOnNetworkError",
            "this server runs in local mode (plain HTTP on loopback): nodes join a server on the "
            "network; start one with `shoal server init` and `shoal server start`",
        )
    return PkiFiles.of(ctx.settings.home)


@dataclass(frozen=True, slots=True)
class CreatedToken:
    token: JoinToken
    row: JoinTokenRow


def create_token(
    ctx: ServerContext, caller: Principal, ttl_s: float | None, uses: int | None
) -> CreatedToken:
    require_admin(caller)
    token = JoinToken.new(pki_of(ctx).ca_hash())
    now = ctx.clock()
    row = JoinTokenRow(
        id=token.token_id,
        secret_hash=secret_hash(token.secret),
        created_by=caller.user,
        created_at=now,
        expires_at=None if ttl_s is None else now + ttl_s,
        max_uses=uses,
        uses=0,
    )
    with ctx.db.write() as session:
        session.add(row)
        detail = {"expiresAt": row.expires_at, "uses": uses}
        audit.record(session, now, caller, "jointoken.create", f"join token {row.id}", detail)
    return CreatedToken(token, row)


def token_state(row: JoinTokenRow, now: float) -> str:
    if row.revoked_at is not None:
        return "revoked"
    if row.expires_at is not None and row.expires_at <= now:
        return "expired"
    if row.max_uses is not None and row.uses >= row.max_uses:
        return "used-up"
    return "valid"


def list_tokens(ctx: ServerContext, caller: Principal) -> list[JoinTokenRow]:
    require_admin(caller)
    with ctx.db.read() as session:
        return list(session.scalars(select(JoinTokenRow).order_by(JoinTokenRow.created_at)))


def revoke_token(ctx: ServerContext, caller: Principal, token_id: str) -> JoinTokenRow:
    require_admin(caller)
    with ctx.db.write() as session:
        row = session.get(JoinTokenRow, token_id)
        if row is None:
            raise ApiError(404, "NoJoinTokenError", f"no join token {token_id!r}")
        if row.revoked_at is not None:
            raise ApiError(409, "JoinTokenRevoked", f"join token {token_id} is already revoked")
        row.revoked_at = ctx.clock()
        audit.record(session, ctx.clock(), caller, "jointoken.revoke", f"join token {row.id}")
    return row


def _check_token(row: JoinTokenRow | None, request: JoinRequest, now: float) -> JoinTokenRow:
    if row is None or not hmac.compare_digest(row.secret_hash, secret_hash(request.secret)):
        raise ApiError(
            401,
            "JoinTokenUnknown",
            f"join token {request.token_id} is unknown to this server (or its secret is wrong); "
            "ask an admin for a new one (`shoal node token create`)",
        )
    state = token_state(row, now)
    refusals = {
        "revoked": ("JoinTokenRevoked", "was revoked"),
        "expired": ("JoinTokenExpired", "has expired"),
        "used-up": ("JoinTokenUsedUp", f"was used {row.uses} time(s), its limit"),
    }
    if state in refusals:
        code, why = refusals[state]
        raise ApiError(
            403,
            code,
            f"join token {row.id} {why}; ask an admin for a new one (`shoal node token create`)",
        )
    return row


def _check_join(request: JoinRequest) -> None:
    if not NODE_NAME_PATTERN.match(request.node):
        raise ApiError(422, "InvalidNodeName", f"node name {request.node!r}: {NODE_NAME_HINT}")
    for key in request.labels:
        if not key or not all(ch.isalnum() or ch in "._/-" for ch in key):
            raise ApiError(422, "InvalidLabel", f"label {key!r}: keys are {LABEL_KEY_HINT}")


def join(ctx: ServerContext, request: JoinRequest) -> JoinResponse:
    """Sign the node's certificate if the token allows, and record it (one transaction)."""
    files = pki_of(ctx)
    _check_join(request)
    now = ctx.clock()
    with ctx.db.write() as session:
        row = _check_token(session.get(JoinTokenRow, request.token_id), request, now)
        active = session.scalar(
            select(func.count())
            .select_from(NodeCertRow)
            .where(NodeCertRow.node == request.node, NodeCertRow.revoked_at.is_(None))
        )
        if active:
            raise ApiError(
                409,
                "NodeNameTaken",
                f"node {request.node} has already joined; pick another --name, or remove it "
                f"first (`shoal node remove {request.node}`)",
            )
        try:
            signed = sign_node_csr(
                files, request.csr, request.node, ctx.settings.node_cert_lifetime_s
            )
        except CertificateRequestError as exc:
            raise ApiError(422, "InvalidCertificateRequest", str(exc)) from None
        used = session.connection().execute(  # guarded: two joins racing for the last use
            update(JoinTokenRow)
            .where(JoinTokenRow.id == row.id, JoinTokenRow.uses == row.uses)
            .values(uses=row.uses + 1)
        )
        if used.rowcount != 1:
            raise ApiError(409, "JoinTokenBusy", f"join token {row.id} was used meanwhile; retry")
        session.add(
            NodeCertRow(
                serial=signed.serial,
                node=request.node,
                fingerprint=signed.fingerprint,
                join_token=row.id,
                labels=dict(request.labels),
                issued_at=now,
                expires_at=signed.expires_at,
                ca_sha256=signed.ca_sha256,
                key_sha256=signed.key_sha256,
            )
        )
        record_node_event(
            session,
            request.node,
            now,
            "joined",
            f"joined with token {row.id}; certificate serial {signed.serial}",
        )
        detail = {"joinToken": row.id, "serial": str(signed.serial), "labels": request.labels}
        audit.record(
            session, now, f"node:{request.node}", "node.join", f"node {request.node}", detail
        )
    return JoinResponse(
        node=request.node,
        certificate=signed.pem,
        ca=files.bundle(),  # both CAs while one rotates: the agent trusts the next one too
        expires_at=signed.expires_at,
    )


@dataclass(frozen=True)
class Removal:
    tasks: int  # tasks that were on the node
    pending: bool  # the node stays (cordoned) until it is NOT_READY, then goes


def remove_node(ctx: ServerContext, caller: Principal, name: str, force: bool) -> Removal:
    """Revoke the node's certificates and delete it. 409 if tasks still run there, unless
    ``force``: then, on a READY node with a certificate, the node is cordoned and its tasks are
    left to fencing. Its agent is refused from now on, so it can no longer renew its lease: its
    keepers stop the tasks, the node goes NOT_READY after the node timeout, the tasks end as lost
    (retried as their jobs allow, never beside a live attempt) and the node is deleted then
    (``delete_removed_nodes``, silent_nodes.py). A NOT_READY node's tasks are lost already: it
    goes at once."""
    require_admin(caller)
    now = ctx.clock()
    with ctx.db.write() as session:
        node = session.get(Node, name)
        certs = list(session.scalars(select(NodeCertRow).where(NodeCertRow.node == name)))
        if node is None and not any(c.revoked_at is None for c in certs):
            raise ApiError(404, "NoNodeError", f"node {name!r} does not exist")
        tasks = list(
            session.scalars(select(Task).where(Task.node == name, Task.state.in_(HOLDING)))
        )
        if tasks and not force:
            raise ApiError(
                409,
                "NodeBusyError",
                f"node {name} still has {len(tasks)} task(s); drain it first (`shoal node drain "
                f"{name}`) or stop them with `shoal node remove {name} --force`",
            )
        for cert in certs:
            cert.revoked_at = cert.revoked_at or now
        if tasks and node is not None and certs and node.state == Liveness.READY.value:
            if node.hold == Hold.NONE.value:
                change_node(session, node, NodeEvent.CORDON, now, by=caller.user)
            record_node_event(
                session,
                name,
                now,
                "removing",
                f"certificate revoked; its {len(tasks)} task(s) are stopped by fencing and end "
                "as lost when it goes NOT_READY (after the node timeout); then it is removed",
                by=caller.user,
            )
            detail = {"tasks": len(tasks), "pending": True}
            audit.record(session, now, caller, "node.remove", f"node {name}", detail)
            return Removal(len(tasks), pending=True)
        for task in tasks:
            on_exit(session, task, ProcessExit(None, lost=True), now)
        if node is not None:
            session.delete(node)
        record_node_event(
            session, name, now, "removed", "removed; its certificate revoked", by=caller.user
        )
        detail = {"tasks": len(tasks), "pending": False}
        audit.record(session, now, caller, "node.remove", f"node {name}", detail)
    ctx.wake_scheduler()
    ctx.wake_agents(noted_news(session))
    return Removal(len(tasks), pending=False)
