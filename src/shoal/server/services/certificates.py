"""Node certificates after the join: renewal over mutual TLS, and rotating the cluster's CA
(docs/cluster.md, "Certificate renewal and CA rotation").

Renewal. An agent renews its certificate after a share of its lifetime (or at once when a CA
rotation asks it to) by sending a signing request for a new key over mutual TLS with its current
certificate. The certificate presented must be recorded for that node, unrevoked, unexpired and
the node's newest; the new one names the same node and is recorded beside it (so ``node remove``
revokes it with the others). The old one is not revoked: connections under way may still use it
and the agent treats a revoked certificate as a removed node. It stays valid until it expires
but can renew no more. One exception: an agent whose answer was lost asks again with the same
new key; the newest certificate already certifies that key, so the presented (older) one may
renew once more.

Rotation. ``rotate`` stages a new CA (``ca.stage_next_ca``): from then on node certificates are
signed by it and both CAs are trusted (the live TLS context is rebuilt, ``tls.reload_live``);
agents learn it from ``status`` and renew. ``finish`` refuses while a node has no certificate of
the new CA (unless forced: those nodes are removed as by ``node remove --force``), revokes every
certificate of the old CA, revokes the join tokens (they pin the old CA), makes the new CA the
current one and issues the server's certificate from it."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.pki import certificate_identity, csr_public_key_sha256
from shoal.protocol import (
    NODE_REMOVED_CODE,
    UNKNOWN_NODE_CERT_CODE,
    CertificateStatus,
    RenewalRequest,
    RenewalResponse,
)
from shoal.server.auth import Principal
from shoal.server.ca import (
    CaInfo,
    CertificateRequestError,
    PkiFiles,
    RotationError,
    ca_info,
    issued_by,
    promote_next_ca,
    sign_node_csr,
    stage_next_ca,
)
from shoal.server.context import ApiError, ServerContext
from shoal.server.node_auth import removed_message
from shoal.server.services import audit
from shoal.server.services.joining import pki_of, remove_node, token_state
from shoal.server.services.node_life import record_node_event
from shoal.server.services.users import require_admin
from shoal.server.tls import reload_live
from shoal.store.models import JoinTokenRow, NodeCertRow


def _when(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _node_certificate(principal: Principal, pem: str | None) -> tuple[str, str]:
    """(node, PEM) of the caller: only a node's own certificate, over mutual TLS, renews."""
    if principal.kind != "node" or principal.node is None or pem is None:
        raise ApiError(
            403,
            "ForbiddenUserError",
            "only a node renews its certificate, over mutual TLS with its current one",
        )
    return principal.node, pem


# ---- renewal ----


@lru_cache(maxsize=4096)
def _signed_by_pem(cert_pem: str, ca_pem: str) -> bool:
    return issued_by(cert_pem, [ca_pem])


def status(ctx: ServerContext, principal: Principal, pem: str | None) -> CertificateStatus:
    """Whether the presented certificate should be renewed now: while the CA rotates, one the
    new CA did not sign. (Renewing as it ages is the agent's own schedule.)"""
    files = pki_of(ctx)
    node, pem = _node_certificate(principal, pem)
    try:
        signing = files.signing_hash()
        upcoming = files.next_ca_cert.read_text() if files.rotating() else None
    except FileNotFoundError:  # a finish moved the files meanwhile: ask again later
        return CertificateStatus(renew=False, signing_ca=files.ca_hash())
    if upcoming is not None and not _signed_by_pem(pem, upcoming):
        reason = (
            f"the cluster's CA is being rotated: node {node}'s certificate is the old CA's; "
            "renew it to get one of the new CA and the new trust bundle"
        )
        return CertificateStatus(renew=True, reason=reason, signing_ca=signing)
    return CertificateStatus(renew=False, signing_ca=signing)


def _newest(session: Session, node: str) -> NodeCertRow | None:
    """The node's current certificate: its newest unrevoked one."""
    return session.scalars(
        select(NodeCertRow)
        .where(NodeCertRow.node == node, NodeCertRow.revoked_at.is_(None))
        .order_by(NodeCertRow.issued_at.desc(), NodeCertRow.serial.desc())
        .limit(1)
    ).first()


def _check_renewable(
    row: NodeCertRow | None, newest: NodeCertRow | None, node: str, key: str, now: float
) -> NodeCertRow:
    if row is None or row.node != node:
        raise ApiError(403, UNKNOWN_NODE_CERT_CODE, "this certificate was not issued to a node")
    if row.revoked_at is not None:
        raise ApiError(403, NODE_REMOVED_CODE, removed_message(node))
    if row.expires_at <= now:
        raise ApiError(
            403,
            "CertificateExpiredError",
            f"the certificate of node {node} (serial {row.serial}) expired at "
            f"{_when(row.expires_at)}; an expired certificate cannot renew: join the node again "
            "with a new token",
        )
    if key == row.key_sha256:
        raise ApiError(
            422,
            "InvalidCertificateRequest",
            "csr: it certifies the key of the certificate being renewed; a renewal needs a new "
            "key made on the node",
        )
    if newest is not None and newest.serial != row.serial and newest.key_sha256 != key:
        raise ApiError(
            403,
            "SupersededCertificateError",
            f"the certificate of node {node} (serial {row.serial}) was replaced by serial "
            f"{newest.serial} at {_when(newest.issued_at)}; only a node's newest certificate "
            f"renews. This one stays valid until {_when(row.expires_at)}; after that, join the "
            "node again with a new token",
        )
    return row


def renew(
    ctx: ServerContext, principal: Principal, pem: str | None, request: RenewalRequest
) -> RenewalResponse:
    """Sign a new certificate for the caller's node from a request for a new key, and record
    it beside the presented one (one transaction)."""
    files = pki_of(ctx)
    node, pem = _node_certificate(principal, pem)
    serial, _, fingerprint = certificate_identity(pem)
    try:
        key = csr_public_key_sha256(request.csr)
    except ValueError as exc:
        raise ApiError(
            422, "InvalidCertificateRequest", f"csr: not a PEM certificate signing request ({exc})"
        ) from None
    now = ctx.clock()
    with ctx.db.write() as session:
        found = session.get(NodeCertRow, serial)
        row = _check_renewable(
            found if found is not None and found.fingerprint == fingerprint else None,
            _newest(session, node),
            node,
            key,
            now,
        )
        try:
            signed = sign_node_csr(files, request.csr, node, ctx.settings.node_cert_lifetime_s)
        except CertificateRequestError as exc:
            raise ApiError(422, "InvalidCertificateRequest", str(exc)) from None
        session.add(
            NodeCertRow(
                serial=signed.serial,
                node=node,
                fingerprint=signed.fingerprint,
                join_token=row.join_token,
                labels=dict(row.labels or {}),
                issued_at=now,
                expires_at=signed.expires_at,
                ca_sha256=signed.ca_sha256,
                key_sha256=signed.key_sha256,
            )
        )
        record_node_event(
            session,
            node,
            now,
            "renewed",
            f"certificate renewed: serial {signed.serial} (valid until "
            f"{_when(signed.expires_at)}, CA {signed.ca_sha256[:16]}) replaces serial {serial}, "
            f"which stays valid until {_when(row.expires_at)}",
        )
        detail = {"serial": signed.serial, "replaces": serial, "ca": signed.ca_sha256}
        audit.record(session, now, f"node:{node}", "node.renew", f"node {node}", detail)
    return RenewalResponse(
        node=node, certificate=signed.pem, ca=files.bundle(), expires_at=signed.expires_at
    )


# ---- CA rotation (admins) ----


@dataclass(frozen=True, slots=True)
class NodeCa:
    node: str
    serial: str  # its newest unrevoked certificate
    ca: str  # "current", "next" or "other": which CA signed it
    expires_at: float


@dataclass(frozen=True, slots=True)
class CaState:
    current: CaInfo
    next: CaInfo | None
    bundle: str
    nodes: list[NodeCa]
    revoked_tokens: int = 0
    retired: str | None = None  # where finish kept the old CA's certificate
    removed: tuple[str, ...] = ()  # nodes a forced finish removed

    @property
    def pending(self) -> list[str]:
        """During a rotation, the nodes whose newest certificate is not the new CA's yet."""
        if self.next is None:
            return []
        return [n.node for n in self.nodes if n.ca != "next"]


def _state(
    ctx: ServerContext,
    files: PkiFiles,
    revoked_tokens: int = 0,
    retired: str | None = None,
    removed: tuple[str, ...] = (),
) -> CaState:
    current = ca_info(files.ca_cert)
    upcoming = ca_info(files.next_ca_cert) if files.rotating() else None
    now = ctx.clock()
    newest: dict[str, NodeCertRow] = {}
    with ctx.db.read() as session:
        rows = session.scalars(
            select(NodeCertRow)
            .where(NodeCertRow.revoked_at.is_(None), NodeCertRow.expires_at > now)
            .order_by(NodeCertRow.issued_at, NodeCertRow.serial)
        )
        for row in rows:
            newest[row.node] = row  # the last one wins: the newest
    nodes = [
        NodeCa(row.node, row.serial, _which(row, current, upcoming), row.expires_at)
        for row in sorted(newest.values(), key=lambda r: r.node)
    ]
    return CaState(current, upcoming, files.bundle(), nodes, revoked_tokens, retired, removed)


def _which(row: NodeCertRow, current: CaInfo, upcoming: CaInfo | None) -> str:
    if upcoming is not None and row.ca_sha256 == upcoming.sha256:
        return "next"
    if row.ca_sha256 is None or row.ca_sha256 == current.sha256:
        return "current"  # NULL: recorded before migration 0025, signed by the first CA
    return "other"


def state(ctx: ServerContext, caller: Principal) -> CaState:
    require_admin(caller)
    return _state(ctx, pki_of(ctx))


def rotate(ctx: ServerContext, caller: Principal) -> CaState:
    """Stage a new CA: it signs node certificates from now on, and both CAs are trusted."""
    require_admin(caller)
    files = pki_of(ctx)
    try:
        stage_next_ca(files)
    except RotationError as exc:
        raise ApiError(409, "CaRotationUnderWay", str(exc)) from None
    reload_live(files)
    upcoming = ca_info(files.next_ca_cert)
    detail = {"current": files.ca_hash(), "next": upcoming.sha256}
    audit.record_alone(ctx, caller, "ca.rotate", "cluster CA", detail)
    return _state(ctx, files)


def finish(ctx: ServerContext, caller: Principal, force: bool) -> CaState:
    """Drop the old CA: the staged one becomes the only one trusted, and signs the server's
    certificate. Refused (409) while a node has no certificate of the new CA, unless ``force``:
    then those nodes are removed as by ``node remove --force`` (they join again)."""
    require_admin(caller)
    files = pki_of(ctx)
    if not files.rotating():
        raise ApiError(
            409,
            "NoCaRotation",
            "no CA rotation is under way: start one with `shoal admin ca rotate`",
        )
    left = _state(ctx, files).pending
    if left and not force:
        raise ApiError(
            409,
            "NodesOnOldCaError",
            f"{len(left)} node(s) have no certificate of the new CA yet: {', '.join(left)}. Wait "
            "for their agents to renew (`shoal admin ca status`; an agent asks every few "
            "minutes, and one that is down renews when it starts), or finish with --force: "
            "those nodes are removed (as `shoal node remove --force`) and join again",
        )
    for name in left:
        try:
            remove_node(ctx, caller, name, force=True)
        except ApiError as exc:
            if exc.status != 404:  # a node already gone is fine
                raise
    new_ca = files.signing_hash()
    now = ctx.clock()
    with ctx.db.write() as session:
        revoked_certs = 0
        for row in session.scalars(select(NodeCertRow).where(NodeCertRow.revoked_at.is_(None))):
            if row.ca_sha256 != new_ca:
                row.revoked_at = now
                revoked_certs += 1
        revoked_tokens = 0
        for token in session.scalars(select(JoinTokenRow)):
            if token_state(token, now) == "valid":
                token.revoked_at = now
                revoked_tokens += 1
        old_ca = files.ca_hash()
        try:  # inside the transaction: if the files cannot be moved, nothing is revoked
            kept = promote_next_ca(files)
        except (RotationError, OSError) as exc:
            raise ApiError(409, "NoCaRotation", f"the CA rotation cannot finish: {exc}") from None
        detail = {
            "retired": old_ca,
            "current": new_ca,
            "revokedCertificates": revoked_certs,
            "revokedJoinTokens": revoked_tokens,
            "removedNodes": left,
        }
        audit.record(session, now, caller, "ca.finish", "cluster CA", detail)
    reload_live(files)
    return _state(ctx, files, revoked_tokens, str(kept), tuple(left))
