"""``/api/v1/jobs/{job}/shares``: who else may reach a job's tasks' ports (docs/proxy.md)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from shoal.server.deps import Caller, Context
from shoal.server.services import job_shares

router = APIRouter(tags=["jobs"])


class SharesBody(BaseModel):
    users: list[str] = Field(default_factory=list, description="Users, by name.")
    groups: list[str] = Field(default_factory=list, description="Groups: their members.")


class SharesOut(SharesBody):
    id: str = Field(description="The job.")


@router.get("/api/v1/jobs/{job}/shares", response_model=SharesOut)
def get_shares(job: str, ctx: Context, caller: Caller) -> SharesOut:
    """Who the job's tasks' ports are shared with (its owner and admins)."""
    job_id, shares = job_shares.get(ctx, caller, job)
    return SharesOut(id=job_id, users=shares.users, groups=shares.groups)


@router.put("/api/v1/jobs/{job}/shares", response_model=SharesOut)
def put_shares(job: str, body: SharesBody, ctx: Context, caller: Caller) -> SharesOut:
    """Share the job's tasks' ports (the task proxy, port-forward) with these users and groups,
    replacing the list; nothing else of the job is shared. Its owner or an admin."""
    wanted = job_shares.Shares(body.users, body.groups)
    job_id, shares = job_shares.replace(ctx, caller, job, wanted)
    return SharesOut(id=job_id, users=shares.users, groups=shares.groups)
