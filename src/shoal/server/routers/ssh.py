"""SSH (docs/ssh.md): users' public keys (``/api/v1/ssh-keys``) and what a client needs to reach a
job's tasks (``/api/v1/jobs/{job}/ssh``). OpenPAI's ``GET /api/v2/jobs/{job}/ssh`` is in
``server/openpai/ssh.py``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response

from shoal.server.deps import Caller, Context
from shoal.server.services import job_ssh, ssh_keys
from shoal.server.services.job_ssh import JobSsh
from shoal.server.services.ssh_keys import SshKeyIn, SshKeyOut

router = APIRouter(tags=["ssh"])


@router.get("/api/v1/ssh-keys", response_model=list[SshKeyOut])
def list_keys(ctx: Context, caller: Caller, user: str | None = None) -> list[SshKeyOut]:
    """The caller's registered SSH public keys (an admin may name another ``user``)."""
    return ssh_keys.list_keys(ctx, caller, user)


@router.post("/api/v1/ssh-keys", response_model=SshKeyOut, status_code=201)
def add_key(body: SshKeyIn, ctx: Context, caller: Caller, user: str | None = None) -> SshKeyOut:
    """Register a public key: the tasks of jobs submitted from now on with OpenPAI's ssh
    plugin accept it."""
    return ssh_keys.add_key(ctx, caller, body, user)


@router.delete("/api/v1/ssh-keys/{name}", status_code=204)
def remove_key(name: str, ctx: Context, caller: Caller, user: str | None = None) -> Response:
    ssh_keys.remove_key(ctx, caller, name, user)
    return Response(status_code=204)


@router.get("/api/v1/jobs/{job}/ssh", response_model=JobSsh)
def job_ssh_info(job: str, ctx: Context, caller: Caller) -> JobSsh:
    """How to reach the job's tasks by ssh: the user to log in as, the host key its tasks
    present, and each task's ssh port (``shoal job ssh`` reads it)."""
    return job_ssh.job_ssh(ctx, caller, job)


@router.get("/api/v1/jobs/{job}/ssh/private-key", response_class=PlainTextResponse)
def job_private_key(job: str, ctx: Context, caller: Caller) -> PlainTextResponse:
    """The private half of the job's own key (its tasks log in to each other with it)."""
    return PlainTextResponse(job_ssh.job_private_key(ctx, caller, job))
