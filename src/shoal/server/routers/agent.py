"""``/api/v1/agent``: the protocol agents speak (sync, log upload, code, data and image
downloads, certificate renewal).

Every call must carry the agent's protocol version (``X-Shoal-Protocol``); a missing or different
one is refused with 426 and a message naming both versions. Every answer carries the server's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import FileResponse
from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool

from shoal.protocol import (
    MISMATCH_CODE,
    MISMATCH_STATUS,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    CertificateStatus,
    LogUploadRequest,
    LogUploadResponse,
    OrdersRequest,
    OrdersResponse,
    RenewalRequest,
    RenewalResponse,
    ReportRequest,
    ReportResponse,
    mismatch_message,
    parse_version,
)
from shoal.server.auth import Principal
from shoal.server.context import ApiError
from shoal.server.deps import Context, agent_caller, bearer, get_context
from shoal.server.node_auth import require_job_on_node, require_own
from shoal.server.services import agent_files, agents, attempt_credentials, certificates
from shoal.server.services.logs import append_chunks
from shoal.server.tls import peer_certificate

router = APIRouter(prefix="/api/v1/agent", tags=["agent"])
OUR_VERSION = {PROTOCOL_HEADER: str(PROTOCOL_VERSION)}


async def agent_of_our_protocol(
    request: Request,
    response: Response,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    version: Annotated[
        str | None,
        Header(
            alias=PROTOCOL_HEADER,
            description=f"The agent's protocol version; this server speaks {PROTOCOL_VERSION}.",
        ),
    ] = None,
) -> Principal:
    """The authenticated agent, if it speaks this server's protocol version (one dependency:
    ``deps.agent_caller``)."""
    agent = await agent_caller(request, await get_context(request), credentials)
    response.headers.update(OUR_VERSION)
    if parse_version(version) != PROTOCOL_VERSION:
        message = mismatch_message(version, str(PROTOCOL_VERSION))
        raise ApiError(MISMATCH_STATUS, MISMATCH_CODE, message, headers=OUR_VERSION)
    return agent


Agent = Annotated[Principal, Depends(agent_of_our_protocol)]


@router.post("/report", response_model=ReportResponse)
async def report(body: ReportRequest, ctx: Context, agent: Agent) -> ReportResponse:
    """Report nodes, started and exited attempts; repeat exits until they are acknowledged."""
    # async: a quiet report's heartbeats wait for a group commit on the event loop
    attempts = [r.attempt_id for r in body.running] + [e.attempt_id for e in body.exited]
    nodes = [n.name for n in body.nodes]
    if attempts:  # reads the store
        await run_in_threadpool(require_own, ctx, agent, nodes, attempts, "a report")
    else:
        require_own(ctx, agent, nodes, attempts, "a report")
    return await agents.report(ctx, body)


@router.post("/orders", response_model=OrdersResponse)
async def orders(body: OrdersRequest, ctx: Context, agent: Agent) -> OrdersResponse:
    """Launch and kill orders for the agent's nodes (long-polls up to ``wait_s``)."""
    # async: the wait parks on the event loop, woken by news about one of the agent's nodes
    require_own(ctx, agent, body.nodes, (), "orders")
    answer = await agents.orders(ctx, body)
    if agent.kind == "kubernetes" and answer.launch:  # its Pods fetch code and data themselves
        answer.launch = attempt_credentials.with_credentials(ctx, answer.launch)
    return answer


@router.post("/logs", response_model=LogUploadResponse)
def upload_logs(body: LogUploadRequest, ctx: Context, agent: Agent) -> LogUploadResponse:
    require_own(ctx, agent, (), [c.attempt_id for c in body.chunks], "log upload")
    return append_chunks(ctx, body)


@router.get("/code/{job_id}", response_class=FileResponse)
def download_code(job_id: str, ctx: Context, agent: Agent) -> FileResponse:
    """The job's code archive (agents that predate ``attempts/{id}/code``)."""
    require_job_on_node(ctx, agent, job_id)
    try:
        path = agent_files.legacy_code(ctx, job_id)
    except ApiError as exc:
        exc.headers.update(OUR_VERSION)
        raise
    return FileResponse(path, media_type="application/gzip", headers=OUR_VERSION)


@router.get("/attempts/{attempt_id}/code", response_class=FileResponse)
def attempt_code(attempt_id: str, ctx: Context, agent: Agent) -> FileResponse:
    """The code archive of an unfinished attempt (streamed; the agent checks its sha256)."""
    try:
        path = agent_files.code_of_attempt(ctx, agent, attempt_id)
    except ApiError as exc:
        exc.headers.update(OUR_VERSION)
        raise
    return FileResponse(path, media_type="application/gzip", headers=OUR_VERSION)


@router.get("/attempts/{attempt_id}/data/{sha256}", response_class=FileResponse)
def attempt_data(attempt_id: str, sha256: str, ctx: Context, agent: Agent) -> FileResponse:
    """A data set an unfinished attempt reads (streamed; a directory is a tar)."""
    try:
        path = agent_files.data_of_attempt(ctx, agent, attempt_id, sha256)
    except ApiError as exc:
        exc.headers.update(OUR_VERSION)
        raise
    return FileResponse(path, media_type="application/octet-stream", headers=OUR_VERSION)


@router.get("/attempts/{attempt_id}/image/{sha256}", response_class=FileResponse)
def attempt_image(attempt_id: str, sha256: str, ctx: Context, agent: Agent) -> FileResponse:
    """The archive of the image an unfinished container attempt runs (streamed; ``podman
    load`` reads it). Only an attempt of the agent's own node, and only its job's image."""
    try:
        path = agent_files.image_of_attempt(ctx, agent, attempt_id, sha256)
    except ApiError as exc:
        exc.headers.update(OUR_VERSION)
        raise
    return FileResponse(path, media_type="application/x-tar", headers=OUR_VERSION)


@router.get("/certificate", response_model=CertificateStatus)
def certificate_status(request: Request, ctx: Context, agent: Agent) -> CertificateStatus:
    """Whether the node should renew the certificate it presents now, whatever its age (a CA
    rotation under way). Node certificates only (409 in local mode)."""
    try:
        return certificates.status(ctx, agent, peer_certificate(request.scope))
    except ApiError as exc:
        exc.headers.update(OUR_VERSION)
        raise


@router.post("/certificate", response_model=RenewalResponse)
def renew_certificate(
    body: RenewalRequest, request: Request, ctx: Context, agent: Agent
) -> RenewalResponse:
    """A new certificate for the node, for a new key, authenticated by its current certificate
    (which must be its newest, unrevoked and unexpired); the answer carries the CAs to trust."""
    try:
        return certificates.renew(ctx, agent, peer_certificate(request.scope), body)
    except ApiError as exc:
        exc.headers.update(OUR_VERSION)
        raise
