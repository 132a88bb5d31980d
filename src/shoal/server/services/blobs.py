"""The blob store: code archives and data sets, each under its sha256 (``blobs/sha256/<hash>``).

An upload is streamed to a temporary file under ``blobs/tmp`` (never held in memory), hashed as
it is written, and moved into place by one rename once its hash is verified. A cut-short upload
(the client went away, the body does not match the hash it announced) leaves nothing behind: its
temporary file is removed at once, and any left by a crash are removed when the server starts.
The same content is stored once, whoever uploads it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from starlette.concurrency import run_in_threadpool

from shoal.server.context import ApiError

SHA256_PATTERN = r"^[0-9a-f]{64}$"
SHA256_RE = re.compile(SHA256_PATTERN)
PARTIAL_IDLE_S = 600.0  # an upload not written to for this long is a dead one
WRITE_BATCH = 1 << 20  # bytes gathered before one write (in a worker thread)


@dataclass(frozen=True)
class Received:
    path: Path  # the temporary file: commit() it or unlink it
    sha256: str
    size: int


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tmp = root / "tmp"

    def path(self, sha256: str) -> Path:
        if not SHA256_RE.match(sha256):
            raise ValueError(f"{sha256!r} is not a sha256")
        return self.root / "sha256" / sha256

    def has(self, sha256: str) -> bool:
        return SHA256_RE.match(sha256) is not None and self.path(sha256).is_file()

    def mark_code(self, sha256: str) -> None:
        """Record that this content was uploaded, and checked, as a code archive. Data sets share
        the store: a job may name only content marked so as its code (another user's data set
        must never be unpacked as someone's code because its hash is known)."""
        marker = self.root / "code" / sha256
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()

    def is_code(self, sha256: str) -> bool:
        """Whether the store has this content as a checked code archive."""
        return self.has(sha256) and (self.root / "code" / sha256).is_file()

    def clear_partial(self, idle_s: float = 0.0) -> int:
        """Remove the temporary files of uploads a previous run did not finish; with
        ``idle_s``, only those not written for that long (in a directory several servers share,
        another may be receiving the others: ``PARTIAL_IDLE_S``)."""
        removed = 0
        cutoff = time.time() - idle_s
        if self.tmp.is_dir():
            for leftover in self.tmp.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    if leftover.stat().st_mtime < cutoff:
                        leftover.unlink(missing_ok=True)
                        removed += 1
        return removed

    def commit(self, received: Received) -> Path:
        """Move a verified upload into place (one rename; the same content may be there)."""
        final = self.path(received.sha256)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(received.path, final)
        _fsync_dir(final.parent)
        return final

    def remove(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)


async def receive(
    store: BlobStore, chunks: AsyncIterator[bytes], expected: str | None, limit: int | None
) -> Received:
    """Stream ``chunks`` to a temporary file; check the size ``limit`` (413) and the announced
    sha256 (400). On any failure (the client going away included) the file is removed."""
    store.tmp.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=store.tmp, prefix="upload-")
    path = Path(name)
    digest = hashlib.sha256()
    size = 0
    pending: list[bytes] = []
    pending_size = 0
    with os.fdopen(fd, "wb") as handle:
        try:
            async for chunk in chunks:
                size += len(chunk)
                if limit is not None and size > limit:
                    raise ApiError(
                        413, "UploadTooLarge", f"the upload is over the limit of {limit} bytes"
                    )
                pending.append(chunk)
                pending_size += len(chunk)
                if pending_size >= WRITE_BATCH:
                    await run_in_threadpool(_write, handle, digest, pending)
                    pending, pending_size = [], 0
            await run_in_threadpool(_write, handle, digest, pending)
            await run_in_threadpool(_sync, handle)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    sha256 = digest.hexdigest()
    if expected is not None and sha256 != expected:
        path.unlink(missing_ok=True)
        raise ApiError(
            400,
            "DigestMismatch",
            f"the upload's sha256 is {sha256}, not the announced {expected}: it was cut short "
            "or changed on the way; upload it again",
        )
    return Received(path, sha256, size)


def _write(handle: BinaryIO, digest: hashlib._Hash, chunks: list[bytes]) -> None:
    for chunk in chunks:
        digest.update(chunk)
        handle.write(chunk)


def _sync(handle: BinaryIO) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
