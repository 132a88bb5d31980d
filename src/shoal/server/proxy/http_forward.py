"""HTTP requests to a task's port, forwarded over tunnels (docs/proxy.md).

httpcore does the HTTP/1.1 (keep-alive, pooling, streaming both ways); its network backend here
opens tunnels instead of sockets: a pooled connection is a tunnel kept open, so a page's many
requests pay the agent's rendezvous once. The host name httpcore sees is the target's key
(``TunnelTarget.key``), registered before the request."""

from __future__ import annotations

import asyncio
import typing
from collections.abc import AsyncIterator

import httpcore
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from shoal.server.context import ServerContext
from shoal.server.proxy.streams import TaskStream, open_stream
from shoal.server.services.tunnels import TunnelTarget
from shoal.server.services.web_sessions import SESSION_COOKIE

# Hop-by-hop headers (RFC 9110 7.6.1) are the connection's own, never forwarded; the user's
# credentials for shoal are not the task's business.
HOP_BY_HOP = frozenset(
    [
        *("connection", "keep-alive", "proxy-authenticate", "proxy-authorization"),
        *("proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"),
    ]
)
NOT_FORWARDED = HOP_BY_HOP | {"authorization", "cookie", "content-length"}
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})
RETRYABLE = (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError)


class TunnelNetworkStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: TaskStream) -> None:
        self.stream = stream
        self._pending = b""

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._pending or await self.stream.read()
        self._pending = data[max_bytes:]
        return data[:max_bytes]

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            try:
                await self.stream.write(buffer)
            except ConnectionResetError as exc:
                raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        await self.stream.aclose()

    def get_extra_info(self, info: str) -> typing.Any:
        if info == "is_readable":  # an idle keep-alive connection with news is a closed one
            return bool(self._pending) or self.stream.readable()
        return None


class TunnelBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.targets: dict[str, TunnelTarget] = {}

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return TunnelNetworkStream(await open_stream(self.ctx, self.targets[host]))

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise NotImplementedError("tunnels reach TCP ports only")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class HttpForwarder:
    """The server's pool of tunnels for HTTP, and the forwarding of one request."""

    def __init__(self, ctx: ServerContext) -> None:
        self.backend = TunnelBackend(ctx)
        self.pool = httpcore.AsyncConnectionPool(
            network_backend=self.backend,
            max_connections=256,
            max_keepalive_connections=64,
            keepalive_expiry=30.0,
        )

    async def aclose(self) -> None:
        await self.pool.aclose()

    async def forward(self, request: Request, target: TunnelTarget, token: str) -> Response:
        """Forward ``request`` (its whole path and query) to ``target``; the answer streams."""
        self.backend.targets[target.key] = target
        url = httpcore.URL(
            scheme=b"http", host=target.key.encode(), port=target.port, target=_target(request)
        )
        headers = forwarded_headers(request, token)
        replayable = request.method in IDEMPOTENT
        for attempt in (1, 2):
            content = _body(request) if not replayable else _empty()
            try:
                answer = await self.pool.handle_async_request(
                    httpcore.Request(request.method, url, headers=headers, content=content)
                )
                break
            except RETRYABLE:  # a kept-alive tunnel the task had closed: once more, afresh
                if not replayable or attempt == 2:
                    raise
        return _response(answer)


def _target(request: Request) -> bytes:
    path = request.scope.get("raw_path") or request.url.path.encode()
    query = request.scope.get("query_string") or b""
    return bytes(path) + (b"?" + bytes(query) if query else b"")


def forwarded_headers(request: Request, token: str) -> list[tuple[bytes, bytes]]:
    """The request's headers as the task sees them: no hop-by-hop ones, no shoal credentials
    (the session cookie is taken out of ``Cookie``; the app's own cookies stay), the usual
    ``X-Forwarded-*``, and the attempt's proxy token for apps that check one."""
    headers = [(k, v) for k, v in request.headers.raw if k.decode().lower() not in NOT_FORWARDED]
    cookies = strip_session_cookie(request.headers.get("cookie", ""))
    if cookies:
        headers.append((b"cookie", cookies.encode("latin-1")))
    client = request.client.host if request.client else ""
    headers += [
        (b"x-forwarded-for", client.encode()),
        (b"x-forwarded-proto", request.url.scheme.encode()),
        (b"x-forwarded-host", request.headers.get("host", "").encode("latin-1")),
        (b"authorization", f"token {token}".encode()),
    ]
    if "content-length" in request.headers and request.method not in IDEMPOTENT:
        headers.append((b"content-length", request.headers["content-length"].encode()))
    elif request.method not in IDEMPOTENT:
        headers.append((b"transfer-encoding", b"chunked"))
    return headers


def strip_session_cookie(header: str) -> str:
    parts = [p.strip() for p in header.split(";") if p.strip()]
    return "; ".join(p for p in parts if p.partition("=")[0].strip() != SESSION_COOKIE)


async def _body(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        if chunk:
            yield chunk


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


def _response(answer: httpcore.Response) -> Response:
    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in typing.cast("typing.AsyncIterable[bytes]", answer.stream):
                yield chunk
        finally:
            await answer.aclose()

    response = StreamingResponse(body(), status_code=answer.status)
    response.raw_headers = [
        (k.lower(), v) for k, v in answer.headers if k.decode().lower() not in HOP_BY_HOP
    ]
    return response
