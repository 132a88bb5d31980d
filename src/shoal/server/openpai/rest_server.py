"""OpenPAI's REST server where OpenPAI's clients look for it (docs/openpai-compat.md, "The VS Code
client"). On OpenPAI it is ``<host>/rest-server`` behind the gateway, whose ``/healthz`` the VS
Code client probes when a cluster is added. shoal answers:

- ``GET /healthz``: the gateway is here, so the client takes ``<host>/rest-server`` as the REST
  server and ``<host>`` (shoal's dashboard) as the web portal;
- ``/rest-server/api/v2/...``: the whole of shoal's ``/api/v2`` (``openpai/__init__.py`` mounts it
  there too);
- ``/rest-server/api/v1/token``, ``.../user/{user}/jobs[/{job}]`` and ``.../jobs``: the OpenPAI
  ``/api/v1`` routes the VS Code client and the SDK's ``PAIV1`` client still call, in OpenPAI's
  shapes (its Kubernetes launcher served them from its v2 job routes, as here).

shoal's own ``/api/v1`` is untouched: the prefix is the discriminator, so nothing depends on
what a client sends in its headers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from shoal.server.deps import Caller, Context
from shoal.server.openpai import accounts, jobs

PREFIX = "/rest-server"

router = APIRouter(tags=["openpai"], include_in_schema=False)


@router.get("/healthz")
def healthz() -> Response:
    """OpenPAI's gateway's health check (``ok``), which its VS Code client probes."""
    return Response("ok", media_type="text/plain")


@router.post(f"{PREFIX}/api/v1/token")
async def token(request: Request, ctx: Context) -> dict[str, Any]:
    """OpenPAI's old login: form (or JSON) ``username``, ``password``, ``expiration`` seconds;
    ``{user, token, admin, hasGitHubPAT}``, as OpenPAI's server answered it."""
    answer = await accounts.basic_login(request, ctx)
    return {**answer, "hasGitHubPAT": False}  # shoal keeps no GitHub tokens


# GET /api/v1/jobs: OpenPAI's job list, with the same filters as /api/v2/jobs
router.add_api_route(f"{PREFIX}/api/v1/jobs", jobs.list_jobs, methods=["GET"])


@router.get(f"{PREFIX}/api/v1/user/{{username}}/jobs")
def user_jobs(username: str, ctx: Context, caller: Caller) -> Any:
    """The user's jobs (OpenPAI rewrote this to ``/jobs?username=<user>``)."""
    return jobs.list_jobs(ctx, caller, username=username)


@router.get(f"{PREFIX}/api/v1/user/{{username}}/jobs/{{name}}")
def user_job(username: str, name: str, ctx: Context, caller: Caller) -> dict[str, Any]:
    """The job, as ``GET /api/v2/jobs/<user>~<name>`` answers it (404 ``NoJobError`` when
    there is none, which the VS Code client takes as "the name is free")."""
    return jobs.get_job(name if "~" in name else f"{username}~{name}", ctx, caller)
