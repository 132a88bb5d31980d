"""A tunnel to a task's port as a byte stream (docs/proxy.md, "How a tunnel runs").

The server cannot connect to an agent: ``open_stream`` offers a ``TunnelOrder`` to the task's
node (``ctx.tunnel_hub``), wakes that agent's long poll, waits for the agent's WebSocket to
attach and for its ``connected`` (the agent reached the port) or ``error``; then the agent's
binary frames are the connection's bytes."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING

from starlette.websockets import WebSocketDisconnect

from shoal.protocol import EXEC_ATTACH_S, exec_control, tunnel_control
from shoal.server.context import ApiError, ServerContext

if TYPE_CHECKING:
    from starlette.websockets import WebSocket

    from shoal.server.services.tunnels import TunnelTarget

CONNECTED_S = 10.0  # the agent's connect to the port, after it attached (its own limit: 5 s)


class TaskStream:
    """One open tunnel on the server's side: read, write, close."""

    def __init__(self, ctx: ServerContext, session_id: str, agent: WebSocket) -> None:
        self.ctx = ctx
        self.session_id = session_id
        self.agent = agent
        self.closed = False  # the agent's side ended (or ``aclose``)
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue()
        self._reader = asyncio.ensure_future(self._read_agent())

    async def _read_agent(self) -> None:
        try:
            while True:
                message = await self.agent.receive()
                if message["type"] == "websocket.disconnect":
                    break
                data = message.get("bytes")
                if data:
                    self._chunks.put_nowait(data)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            self.closed = True
            self._chunks.put_nowait(b"")  # the end, for a reader waiting

    async def read(self) -> bytes:
        """The next bytes from the task; b"" once its side has closed."""
        if self.closed and self._chunks.empty():
            return b""
        data = await self._chunks.get()
        if not data:
            self._chunks.put_nowait(b"")  # every later read sees the end too
        return data

    def readable(self) -> bool:
        """Bytes or the end are waiting (an idle pooled connection that is readable is dead)."""
        return self.closed or not self._chunks.empty()

    async def write(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionResetError("the task's side of the tunnel has closed")
        try:
            await self.agent.send_bytes(data)
        except (WebSocketDisconnect, RuntimeError) as exc:
            self.closed = True
            raise ConnectionResetError("the tunnel's agent connection ended") from exc

    async def write_eof(self) -> None:
        """The user's side has no more to write: the agent half-closes the connection."""
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await self.agent.send_text(exec_control("eof"))

    async def aclose(self) -> None:
        if not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        self.closed = True
        with contextlib.suppress(Exception):
            await self.agent.close(1000)
        self.ctx.tunnel_hub.close(self.session_id)  # the agent's handler returns


async def open_stream(ctx: ServerContext, target: TunnelTarget) -> TaskStream:
    """A tunnel to ``target``; ``ApiError`` 504 when its agent does not attach in time, 502 when
    the agent could not connect (nothing listening, not a task port, task gone)."""
    session_id = uuid.uuid4().hex
    live = ctx.tunnel_hub.open(target.order(session_id), target.node)
    ctx.wake_agents([target.node])
    try:
        agent = await asyncio.wait_for(asyncio.shield(live.attached), EXEC_ATTACH_S)
        first = await asyncio.wait_for(agent.receive(), CONNECTED_S)
    except (TimeoutError, WebSocketDisconnect, RuntimeError) as exc:
        ctx.tunnel_hub.close(session_id)
        raise _not_attached(target) from exc
    except BaseException:
        ctx.tunnel_hub.close(session_id)
        raise
    text = first.get("text") if first["type"] == "websocket.receive" else None
    control = tunnel_control(text or "")
    if control is None or control["type"] != "connected":
        ctx.tunnel_hub.close(session_id)
        with contextlib.suppress(Exception):
            await agent.close(1000)
        code = str((control or {}).get("code") or "AgentLostError")
        message = str((control or {}).get("message") or "the agent's connection ended")
        raise ApiError(502, code, message)
    return TaskStream(ctx, session_id, agent)


def _not_attached(target: TunnelTarget) -> ApiError:
    return ApiError(
        504,
        "AgentDidNotAttachError",
        f"the agent of node {target.node} did not open the tunnel to task "
        f"{target.role}/{target.index} within {EXEC_ATTACH_S:g} s: is it running and "
        "reporting (`shoal node list`)? Try again",
    )
