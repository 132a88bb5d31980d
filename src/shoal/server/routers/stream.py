"""``GET /api/v1/stream``: server-sent events telling open pages that what they show changed.

Each event carries only the new generation (``services/live.py``), never data: the page reloads
what it shows through the API, so what it sees is authorised exactly as every other call."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from shoal.server.deps import Caller
from shoal.server.services.live import ChangeWatch

router = APIRouter(tags=["dashboard"])

KEEPALIVE_S = 15.0


def change_watch(request: Request) -> ChangeWatch:
    watch: ChangeWatch | None = getattr(request.app.state, "change_watch", None)
    if watch is None:
        watch = request.app.state.change_watch = ChangeWatch(request.app.state.context.db)
    return watch


@router.get(
    "/api/v1/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def stream(request: Request, _: Caller) -> StreamingResponse:
    """Server-sent events: ``change`` with ``{"generation": N}`` whenever a job, task, node or
    virtual cluster changes (at most every half second), a comment every 15 s otherwise."""
    watch = change_watch(request)

    async def events() -> AsyncIterator[str]:
        seen = await watch.current()
        yield "retry: 2000\n" + _event(seen)
        while not await request.is_disconnected():
            generation = await watch.wait(seen, KEEPALIVE_S)
            if generation == seen:
                yield ": keepalive\n\n"
                continue
            seen = generation
            yield _event(seen)

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _event(generation: int) -> str:
    return f"event: change\ndata: {json.dumps({'generation': generation})}\n\n"
