"""``/api/v1/agent``: the protocol agents speak (sync, log upload, code download)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from shoal.protocol import (
    LogUploadRequest,
    LogUploadResponse,
    OrdersRequest,
    OrdersResponse,
    ReportRequest,
    ReportResponse,
)
from shoal.server.context import ApiError
from shoal.server.deps import AgentCaller, Context
from shoal.server.services import agents
from shoal.server.services.logs import append_chunks

router = APIRouter(prefix="/api/v1/agent", tags=["agent"])


@router.post("/report", response_model=ReportResponse)
def report(body: ReportRequest, ctx: Context, agent: AgentCaller) -> ReportResponse:
    """Report nodes, started and exited attempts; repeat exits until they are acknowledged."""
    return agents.report(ctx, body)


@router.post("/orders", response_model=OrdersResponse)
def orders(body: OrdersRequest, ctx: Context, agent: AgentCaller) -> OrdersResponse:
    """Launch and kill orders for the agent's nodes (long-polls up to ``wait_s``)."""
    return agents.orders(ctx, body)


@router.post("/logs", response_model=LogUploadResponse)
def upload_logs(body: LogUploadRequest, ctx: Context, agent: AgentCaller) -> LogUploadResponse:
    return append_chunks(ctx, body)


@router.get("/code/{job_id}", response_class=FileResponse)
def download_code(job_id: str, ctx: Context, agent: AgentCaller) -> FileResponse:
    path = ctx.settings.code_dir / f"{job_id}.tar.gz"
    if not job_id.isdigit() or not path.exists():
        raise ApiError(404, "NoCodeError", f"job {job_id} has no code archive")
    return FileResponse(path, media_type="application/gzip")
