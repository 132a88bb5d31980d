"""The audit log (docs/audit.md): ``GET /api/v1/audit``, for admins."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from shoal.server.admin_schemas import AuditEventOut
from shoal.server.deps import Caller, Context
from shoal.server.services import audit

router = APIRouter(tags=["audit"])


@router.get(
    "/api/v1/audit",
    response_model=list[AuditEventOut],
    responses={403: {"description": "Not an admin (ForbiddenUserError)."}},
)
def read_audit_log(
    ctx: Context,
    caller: Caller,
    since: Annotated[float | None, Query(ge=0, description="From this time (epoch s).")] = None,
    until: Annotated[float | None, Query(ge=0, description="Before this time (epoch s).")] = None,
    actor: Annotated[str | None, Query(max_length=64, description="Only this actor.")] = None,
    action: Annotated[
        str | None,
        Query(max_length=48, description="An action, or a prefix ending in '.' (token.)."),
    ] = None,
    outcome: Literal["ok", "refused"] | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> list[AuditEventOut]:
    """Security-relevant actions, newest first."""
    query = audit.AuditQuery(since, until, actor, action, outcome, limit)
    rows = audit.read_events(ctx, caller, query)
    return [
        AuditEventOut(
            id=r.id,
            at=r.at,
            actor=r.actor,
            action=r.action,
            target=r.target,
            outcome="refused" if r.outcome == audit.REFUSED else "ok",
            client=r.client,
            detail=r.detail,
        )
        for r in rows
    ]
