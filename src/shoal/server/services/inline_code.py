"""The code archive a submission names: one uploaded before (``code_hash``), or a small one sent
inline as base64 (``code_archive``), checked and kept in the blob store like an upload."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from pathlib import Path

from shoal import archives
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import SubmitRequest
from shoal.server.services.blobs import Received
from shoal.server.services.datasets import blob_store


def code_hash_of(ctx: ServerContext, request: SubmitRequest) -> str | None:
    """The sha256 of the job's code archive: ``code_hash`` (uploaded before), or the inline
    base64 ``code_archive`` (checked and stored in the blob store like an upload)."""
    if request.code_hash is not None:
        if not blob_store(ctx).is_code(request.code_hash):
            raise ApiError(
                400,
                "NoCodeArchive",
                f"the server has no code archive {request.code_hash}: upload it first "
                "(PUT /api/v1/code/{sha256}; `shoal job submit` does)",
            )
        return request.code_hash
    if request.code_archive is None:
        return None
    try:
        data = base64.b64decode(request.code_archive, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "InvalidCodeArchive", "code_archive is not valid base64") from None
    if ctx.settings.max_upload_bytes and len(data) > ctx.settings.max_upload_bytes:
        raise ApiError(
            413,
            "CodeArchiveTooLarge",
            f"the code archive is {len(data)} bytes; the limit is {ctx.settings.max_upload_bytes}",
        )
    return _keep_inline_archive(ctx, data)


def _keep_inline_archive(ctx: ServerContext, data: bytes) -> str:
    store = blob_store(ctx)
    store.tmp.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=store.tmp, prefix="inline-")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            archives.check(path, max_unpacked=ctx.settings.max_upload_bytes * 20 or None)
        except archives.ArchiveError as exc:
            raise ApiError(400, "UnsafeArchive", f"the code archive is refused: {exc}") from None
        sha256 = hashlib.sha256(data).hexdigest()
        store.commit(Received(path, sha256, len(data)))
        store.mark_code(sha256)
    finally:
        path.unlink(missing_ok=True)
    return sha256
