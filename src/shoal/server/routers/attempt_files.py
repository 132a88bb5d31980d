"""``/api/v1/attempts/{id}``: an attempt's code archive and data sets, for the attempt itself.

A Kubernetes Pod's init container calls these with its attempt's credential (a Bearer token
minted into the Kubernetes agent's launch orders; services/attempt_credentials.py): no user or
agent token reaches a Pod. The answers are those of the agent API's routes of the same names.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from shoal.server.deps import Context
from shoal.server.services import agent_files, attempt_credentials

router = APIRouter(prefix="/api/v1/attempts", tags=["attempts"])
credential = HTTPBearer(
    auto_error=False, description="The attempt's credential (its Pod's Secret, key fetch-token)."
)
Credential = Annotated[HTTPAuthorizationCredentials | None, Depends(credential)]


def _checked(ctx: Context, given: Credential, attempt_id: str) -> None:
    attempt_credentials.check(ctx, given.credentials if given else None, attempt_id)


@router.get("/{attempt_id}/code", response_class=FileResponse)
def attempt_code(attempt_id: str, ctx: Context, given: Credential) -> FileResponse:
    """The code archive of an unfinished attempt (a gzipped tar; its sha256 is in the order)."""
    _checked(ctx, given, attempt_id)
    path = agent_files.code_of_attempt(ctx, agent_files.ATTEMPT, attempt_id)
    return FileResponse(path, media_type="application/gzip")


@router.get("/{attempt_id}/data/{sha256}", response_class=FileResponse)
def attempt_data(attempt_id: str, sha256: str, ctx: Context, given: Credential) -> FileResponse:
    """A data set an unfinished attempt reads (a directory is a tar)."""
    _checked(ctx, given, attempt_id)
    path = agent_files.data_of_attempt(ctx, agent_files.ATTEMPT, attempt_id, sha256)
    return FileResponse(path, media_type="application/octet-stream")
