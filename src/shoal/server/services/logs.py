"""Task logs on the server: appended in ordered, offset-checked chunks shipped by agents, so a
repeated upload is harmless and logs outlive the task, the node and a server restart."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from shoal.core.states import State
from shoal.protocol import LogUploadRequest, LogUploadResponse
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import LogChunk
from shoal.server.services.log_files import record_time
from shoal.server.services.log_pause import append_or_cut, pause, read_shift
from shoal.server.services.reports import task_by_attempt
from shoal.server.storage import Space, space
from shoal.store.models import Task

MAX_READ = 1024 * 1024


def log_path(ctx: ServerContext, task: Task, attempt: int, stream: str) -> Path:
    return (
        ctx.settings.logs_dir
        / task.job_id
        / f"{task.role}-{task.index}"
        / f"{task.job_attempt}.{attempt}"
        / stream
    )


def append_chunks(ctx: ServerContext, request: LogUploadRequest) -> LogUploadResponse:
    sizes: dict[str, dict[str, int]] = {}
    room = space(ctx.settings)  # below the reserve, logs stop growing (docs/disk.md)
    with ctx.db.read() as session:
        for chunk in request.chunks:
            task = task_by_attempt(session, chunk.attempt_id)
            if task is None:
                continue
            path = log_path(ctx, task, task.attempt, chunk.stream)
            try:
                data = base64.b64decode(chunk.data, validate=True)
            except (binascii.Error, ValueError):
                raise ApiError(400, "InvalidLogChunk", "log data is not base64") from None
            size = _append_at(path, chunk.offset, data, chunk.at or ctx.clock(), room)
            sizes.setdefault(chunk.attempt_id, {})[chunk.stream] = size
    return LogUploadResponse(sizes=sizes)


def _append_at(path: Path, offset: int, data: bytes, at: float, room: Space) -> int:
    """Append ``data`` if it starts where the file ends (noting when it was read in the time
    index beside the file); return the file's size either way, as the agent counts it (without
    the markers of ``log_pause``). On a full disk nothing is appended but one marker."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = path.stat().st_size if path.exists() else 0
    shift = read_shift(path) if stored else 0
    size = stored - shift
    if offset > size or offset + len(data) <= size:
        return size  # a gap (agent must resend from ``size``) or already stored
    if room.low or not append_or_cut(path, stored, data[size - offset :]):
        pause(path, stored, shift, room, at)
        return size  # the agent keeps the rest and sends it again
    record_time(path, stored, at)
    return offset + len(data)


def read_chunk(
    ctx: ServerContext, task: Task, stream: str, offset: int, attempt: int | None
) -> LogChunk:
    which = attempt or task.attempt
    if which < 1 or which > task.attempt:
        raise ApiError(404, "NoTaskLogError", f"task has no attempt {which}")
    path = log_path(ctx, task, which, stream)
    data = b""
    size = 0
    if path.exists():
        size = path.stat().st_size
        with open(path, "rb") as handle:
            handle.seek(min(offset, size))
            data = handle.read(MAX_READ)
    next_offset = min(offset, size) + len(data)
    finished = which < task.attempt or State(task.state).is_terminal
    return LogChunk(
        role=task.role,
        index=task.index,
        attempt=which,
        stream=stream,
        offset=offset,
        nextOffset=next_offset,
        data=data.decode("utf-8", errors="replace"),
        complete=finished and next_offset >= size,
    )
