"""WebSockets to a task's port, forwarded over a tunnel (docs/proxy.md): Jupyter's kernels,
TensorBoard's and any app's live updates.

The user's WebSocket is Starlette's; the task's side is the websockets library's client protocol
(sans-I/O) over the tunnel's bytes. The task's handshake comes first, so the user's WebSocket is
accepted with the subprotocol the task chose; then messages pass both ways until either side
closes, and its close code passes on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake
from websockets.frames import Close, Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.typing import Origin, Subprotocol
from websockets.uri import parse_uri

from shoal.server.proxy.http_forward import strip_session_cookie
from shoal.server.proxy.streams import TaskStream
from shoal.server.services.tunnels import TunnelTarget

UPSTREAM_FAILED = 1014  # "bad gateway": the task refused the WebSocket or closed without a word


class TaskSocket:
    """The task's side of a forwarded WebSocket."""

    def __init__(self, stream: TaskStream, protocol: ClientProtocol) -> None:
        self.stream = stream
        self.protocol = protocol
        self._parts: list[bytes] = []
        self._opcode = Opcode.TEXT

    async def flush(self) -> None:
        for data in self.protocol.data_to_send():
            if data:
                await self.stream.write(data)

    async def handshake(self) -> Response | None:
        """Send the upgrade request, read the answer (None: the task closed first)."""
        await self.flush()
        while True:
            data = await self.stream.read()
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
            for event in self.protocol.events_received():
                if isinstance(event, Response):
                    return event
            await self.flush()
            if not data:
                return None

    async def frames(self) -> list[tuple[Opcode, bytes]]:
        """The next whole messages (text or binary) and, at the end, a close; [] at EOF."""
        data = await self.stream.read()
        if data:
            self.protocol.receive_data(data)
        else:
            self.protocol.receive_eof()
        messages: list[tuple[Opcode, bytes]] = []
        for event in self.protocol.events_received():
            if isinstance(event, Frame):
                messages += self._assemble(event)
        await self.flush()  # pongs, the close's answer
        if not data:
            messages.append((Opcode.CLOSE, b""))
        return messages

    def _assemble(self, frame: Frame) -> list[tuple[Opcode, bytes]]:
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            self._opcode, self._parts = frame.opcode, [bytes(frame.data)]
        elif frame.opcode == Opcode.CONT:
            self._parts.append(bytes(frame.data))
        elif frame.opcode == Opcode.CLOSE:
            return [(Opcode.CLOSE, bytes(frame.data))]
        else:
            return []  # ping and pong: answered by the protocol
        if not frame.fin:
            return []
        return [(self._opcode, b"".join(self._parts))]


async def forward_websocket(
    user: WebSocket,
    stream: TaskStream,
    target: TunnelTarget,
    token: str,
    touch: Callable[[], None] = lambda: None,
) -> None:
    """Relay ``user`` (not yet accepted) to the task's WebSocket at the same path; ``touch`` is
    called for each message either way."""
    task = TaskSocket(stream, _client(user, target, token))
    try:
        answer = await task.handshake()
    except InvalidHandshake:
        answer = None
    if answer is None or task.protocol.state is not State.OPEN:
        status = answer.status_code if answer is not None else "no answer"
        await user.accept()
        await user.close(UPSTREAM_FAILED, f"the task refused the WebSocket ({status})"[:120])
        return
    await user.accept(subprotocol=answer.headers.get("Sec-WebSocket-Protocol"))
    upstream = asyncio.ensure_future(_user_to_task(user, task, touch))
    try:
        await _task_to_user(task, user, touch)
    finally:
        upstream.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await upstream


def _client(user: WebSocket, target: TunnelTarget, token: str) -> ClientProtocol:
    path = user.scope.get("raw_path") or user.url.path.encode()
    query = user.scope.get("query_string") or b""
    resource = bytes(path).decode("latin-1")
    if query:
        resource += "?" + bytes(query).decode("latin-1")
    origin = user.headers.get("origin")
    protocol = ClientProtocol(
        parse_uri(f"ws://{target.key}:{target.port}{resource}"),
        origin=Origin(origin) if origin else None,
        subprotocols=[Subprotocol(s) for s in user.scope.get("subprotocols", [])] or None,
        max_size=None,
    )
    request = protocol.connect()
    del request.headers["Host"]
    request.headers["Host"] = user.headers.get("host", "")
    cookies = strip_session_cookie(user.headers.get("cookie", ""))
    if cookies:
        request.headers["Cookie"] = cookies
    request.headers["Authorization"] = f"token {token}"
    request.headers["X-Forwarded-For"] = user.client.host if user.client else ""
    request.headers["X-Forwarded-Proto"] = "https" if user.url.scheme == "wss" else "http"
    protocol.send_request(request)
    return protocol


async def _user_to_task(user: WebSocket, task: TaskSocket, touch: Callable[[], None]) -> None:
    while True:
        message = await user.receive()
        touch()
        if message["type"] == "websocket.disconnect":
            code = message.get("code") or 1000
            task.protocol.send_close(code if code < 4999 and code not in (1005, 1006) else 1000)
            await task.flush()
            return
        if message.get("bytes") is not None:
            task.protocol.send_binary(message["bytes"])
        elif message.get("text") is not None:
            task.protocol.send_text(message["text"].encode())
        await task.flush()


async def _task_to_user(task: TaskSocket, user: WebSocket, touch: Callable[[], None]) -> None:
    while True:
        for opcode, data in await task.frames():
            touch()
            if opcode == Opcode.CLOSE:
                close = Close.parse(data) if data else None
                code = close.code if close is not None and close.code not in (1005, 1006) else 1000
                with contextlib.suppress(Exception):
                    await user.close(code, close.reason if close is not None else "")
                return
            try:
                if opcode == Opcode.TEXT:
                    await user.send_text(data.decode())
                else:
                    await user.send_bytes(data)
            except (WebSocketDisconnect, RuntimeError):
                return
