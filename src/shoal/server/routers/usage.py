"""``/api/v1/usage``: what users or virtual clusters used (accounting, like ``sreport``)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from shoal.server.admin_schemas import UsageReport
from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.services import accounting
from shoal.spec.units import parse_duration

router = APIRouter(prefix="/api/v1/usage", tags=["accounting"])


@router.get("", response_model=UsageReport)
def get_usage(
    ctx: Context,
    caller: Caller,
    by: Literal["user", "vc"] = "user",
    since: Annotated[
        str | None, Query(description="A window: seconds or a duration (30d, 12h, 10m).")
    ] = None,
) -> UsageReport:
    """Jobs, GPU-hours, CPU-hours, elapsed hours and peak memory summed per user or VC over
    the jobs active in the window. Non-admins see their own jobs' usage only."""
    since_s = None
    if since is not None:
        try:
            since_s = float(parse_duration(since, "since"))
        except ValueError as exc:
            raise ApiError(
                400, "InvalidParametersError", str(exc), [{"path": "since", "message": str(exc)}]
            ) from None
    everyone = caller.is_admin
    with ctx.db.read() as session:
        rows = accounting.usage(
            session, by, since_s, ctx.clock(), user=None if everyone else caller.user
        )
    return UsageReport(by=by, sinceS=since_s, scope="everyone" if everyone else "own", rows=rows)
