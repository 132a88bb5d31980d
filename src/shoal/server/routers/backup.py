"""``GET /api/v1/admin/backup``: the store and its blobs as one tar, for ``shoal admin backup``
(admins; docs/backup.md)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from shoal.server.deps import Caller, Context
from shoal.server.services import audit, backup
from shoal.server.services.users import require_admin

router = APIRouter(tags=["admin"])


@router.get(
    "/api/v1/admin/backup",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-tar": {}}, "description": "the backup (tar)"}},
)
def make_backup(ctx: Context, caller: Caller) -> StreamingResponse:
    """A consistent copy of the store taken now (one read transaction: SQLite's online backup,
    or a PostgreSQL snapshot copied into a SQLite file), with the code archives, data sets and
    images it refers to, as one tar."""
    require_admin(caller)
    snapshot = backup.take(ctx)
    detail = {
        "jobs": snapshot.manifest["jobs"],
        "schemaRevision": snapshot.manifest["schemaRevision"],
    }
    audit.record_alone(ctx, caller, "store.backup", "store", detail)
    return StreamingResponse(
        backup.stream(snapshot, ctx.clock()),
        media_type="application/x-tar",
        headers={
            "Content-Disposition": 'attachment; filename="shoal-backup.tar"',
            "X-Shoal-Jobs": str(snapshot.manifest["jobs"]),
            "X-Shoal-Schema-Revision": str(snapshot.manifest["schemaRevision"]),
        },
        background=BackgroundTask(snapshot.discard),  # also when the stream was not read to the end
    )
