"""Joining a server on the network: the CA (fetched without trust, pinned by the token), the
join itself (token + certificate signing request), join tokens, removing a node, and rotating
the cluster's CA (admins; ``/api/v1/admin/ca``). Renewal is the agent API's
(``/api/v1/agent/certificate``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field

from shoal.protocol import (
    MISMATCH_CODE,
    MISMATCH_STATUS,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    JoinRequest,
    JoinResponse,
    mismatch_message,
    parse_version,
)
from shoal.server.ca import CaInfo
from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.services import certificates, joining
from shoal.store.models import JoinTokenRow

router = APIRouter(tags=["join"])
WILDCARDS = ("0.0.0.0", "::", "")


class JoinTokenIn(BaseModel):
    ttlSeconds: float | None = Field(3600.0, gt=0, description="None: never expires.")
    uses: int | None = Field(1, ge=1, description="How many nodes may join; None: any number.")


class JoinTokenOut(BaseModel):
    id: str
    createdBy: str
    createdAt: float
    expiresAt: float | None
    maxUses: int | None
    uses: int
    state: str = Field(description="valid, expired, used-up or revoked.")


class NewJoinToken(JoinTokenOut):
    token: str = Field(description="Shown once: id, secret and the CA's public-key hash.")
    serverUrl: str | None = Field(None, description="The URL the server listens at, if known.")


class NodeRemoved(BaseModel):
    name: str
    stoppedTasks: int = Field(description="Tasks that were on the node.")
    pending: bool = Field(
        False,
        description="True: the node is cordoned and stays until it is NOT_READY (its tasks are "
        "stopped by fencing, then end as lost); then it is removed.",
    )


class CaOut(BaseModel):
    sha256: str = Field(description="SHA-256 of its public key (what join tokens pin).")
    subject: str
    notAfter: float


class NodeCaOut(BaseModel):
    node: str
    serial: str = Field(description="Its newest unrevoked certificate.")
    ca: str = Field(description="Which CA signed it: current, next (a rotation's) or other.")
    expiresAt: float


class CaStatusOut(BaseModel):
    rotating: bool = Field(description="A new CA is staged: both are trusted until finish.")
    current: CaOut = Field(description="Signs the server's certificate; join tokens pin it.")
    next: CaOut | None = Field(None, description="The staged CA: it signs node certificates.")
    nodes: list[NodeCaOut]
    pending: list[str] = Field(
        description="During a rotation, the nodes with no certificate of the new CA yet."
    )
    bundle: str = Field(description="The CA certificates to trust now, PEM.")
    revokedJoinTokens: int = Field(0, description="finish: join tokens revoked (they pinned it).")
    retired: str | None = Field(
        None, description="finish: where the server keeps the old CA's certificate."
    )
    removedNodes: list[str] = Field(
        default_factory=list, description="finish --force: the nodes removed (still on the old CA)."
    )


def _ca_out(info: CaInfo) -> CaOut:
    return CaOut(sha256=info.sha256, subject=info.subject, notAfter=info.not_after)


def _ca_status(state: certificates.CaState) -> CaStatusOut:
    return CaStatusOut(
        rotating=state.next is not None,
        current=_ca_out(state.current),
        next=None if state.next is None else _ca_out(state.next),
        nodes=[
            NodeCaOut(node=n.node, serial=n.serial, ca=n.ca, expiresAt=n.expires_at)
            for n in state.nodes
        ],
        pending=state.pending,
        bundle=state.bundle,
        revokedJoinTokens=state.revoked_tokens,
        retired=state.retired,
        removedNodes=list(state.removed),
    )


def _token_out(row: JoinTokenRow, now: float) -> JoinTokenOut:
    return JoinTokenOut(
        id=row.id,
        createdBy=row.created_by,
        createdAt=row.created_at,
        expiresAt=row.expires_at,
        maxUses=row.max_uses,
        uses=row.uses,
        state=joining.token_state(row, now),
    )


@router.get("/api/v1/join/ca", response_class=PlainTextResponse)
def join_ca(ctx: Context) -> PlainTextResponse:
    """The cluster's CA certificate (PEM). Public: a joining agent trusts it only if its
    public-key hash is the one its join token carries."""
    files = joining.pki_of(ctx)
    return PlainTextResponse(files.ca_cert.read_text(), media_type="application/x-pem-file")


@router.post("/api/v1/join", response_model=JoinResponse)
def join(
    body: JoinRequest,
    ctx: Context,
    version: Annotated[str | None, Header(alias=PROTOCOL_HEADER)] = None,
) -> JoinResponse:
    """A node joins with a join token and a certificate signing request; it gets its client
    certificate (CN = its name). Authenticated by the token, not by a Bearer token."""
    if parse_version(version) != PROTOCOL_VERSION:
        message = mismatch_message(version, str(PROTOCOL_VERSION))
        raise ApiError(MISMATCH_STATUS, MISMATCH_CODE, message)
    return joining.join(ctx, body)


@router.post("/api/v1/join-tokens", response_model=NewJoinToken, status_code=201)
def create_join_token(body: JoinTokenIn, ctx: Context, caller: Caller) -> NewJoinToken:
    """A join token for ``shoal agent join`` (admins); its secret is shown only here."""
    created = joining.create_token(ctx, caller, body.ttlSeconds, body.uses)
    settings = ctx.settings
    url = None if settings.host in WILDCARDS else settings.url
    out = _token_out(created.row, ctx.clock())
    return NewJoinToken(**out.model_dump(), token=str(created.token), serverUrl=url)


@router.get("/api/v1/join-tokens", response_model=list[JoinTokenOut])
def list_join_tokens(ctx: Context, caller: Caller) -> list[JoinTokenOut]:
    now = ctx.clock()
    return [_token_out(row, now) for row in joining.list_tokens(ctx, caller)]


@router.delete("/api/v1/join-tokens/{token_id}", response_model=JoinTokenOut)
def revoke_join_token(token_id: str, ctx: Context, caller: Caller) -> JoinTokenOut:
    """No node can join with this token any more (nodes that joined with it stay)."""
    return _token_out(joining.revoke_token(ctx, caller, token_id), ctx.clock())


@router.delete("/api/v1/nodes/{name}", response_model=NodeRemoved)
def remove_node(
    name: str,
    ctx: Context,
    caller: Caller,
    force: Annotated[bool, Query(description="Stop the node's tasks (else 409).")] = False,
) -> NodeRemoved:
    """Revoke the node's certificate and remove it (admins); its agent is refused from then on."""
    removal = joining.remove_node(ctx, caller, name, force)
    return NodeRemoved(name=name, stoppedTasks=removal.tasks, pending=removal.pending)


@router.get("/api/v1/admin/ca", response_model=CaStatusOut)
def ca_status(ctx: Context, caller: Caller) -> CaStatusOut:
    """The cluster's CA, the staged one during a rotation, and which CA each node's newest
    certificate is from (admins)."""
    return _ca_status(certificates.state(ctx, caller))


@router.post("/api/v1/admin/ca/rotate", response_model=CaStatusOut)
def rotate_ca(ctx: Context, caller: Caller) -> CaStatusOut:
    """Stage a new CA (admins): it signs node certificates from now on, both CAs are trusted,
    and agents renew onto it. 409 if a rotation is under way."""
    return _ca_status(certificates.rotate(ctx, caller))


@router.post("/api/v1/admin/ca/finish", response_model=CaStatusOut)
def finish_ca_rotation(
    ctx: Context,
    caller: Caller,
    force: Annotated[
        bool, Query(description="Remove the nodes still on the old CA (else 409 naming them).")
    ] = False,
) -> CaStatusOut:
    """Drop the old CA (admins): the new one becomes the only CA trusted and signs the server's
    certificate; the old CA's certificates and the join tokens (they pin it) are revoked."""
    return _ca_status(certificates.finish(ctx, caller, force))
