"""The proxy's own port (docs/proxy.md, "Why a port of its own").

A page a task serves runs its scripts with the privileges of its origin. On the dashboard's
origin, a job's page opened by an admin could read the admin's CSRF token and act as the admin.
So the server listens on a second port, the proxy's: the same app, but there only ``/proxy/...``
is answered, and on the API's port ``/proxy/...`` is not. Both ports share the host, so the
dashboard's session cookie (host-wide, ``SameSite=Strict``) signs the user in to both; the
proxy's pages cannot read the API's answers (another origin, no CORS) nor send it a
state-changing call (those need the CSRF header, which needs CORS)."""

from __future__ import annotations

import socket

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from shoal.server.context import ServerContext
from shoal.server.services.tunnels import PROXY_PREFIX


class PortGate:
    """Each port answers its own paths only."""

    def __init__(self, app: ASGIApp, ctx: ServerContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        server = scope.get("server") or (None, None)
        on_proxy_port = self.ctx.proxy_port is not None and server[1] == self.ctx.proxy_port
        is_proxy_path = scope["path"].startswith(PROXY_PREFIX + "/")
        if on_proxy_port == is_proxy_path:
            await self.app(scope, receive, send)
            return
        if on_proxy_port:
            message = (
                f"this port ({self.ctx.proxy_port}) serves tasks' ports only "
                f"({PROXY_PREFIX}/JOB/ROLE/INDEX/LABEL/); the API and the dashboard are on "
                f"port {self.ctx.settings.port}"
            )
        elif self.ctx.proxy_port is None:
            message = "the task proxy is off on this server (`shoal server start --proxy-port`)"
        else:
            message = f"tasks' ports are served on the proxy's port, {self.ctx.proxy_port}"
        await _not_here(scope, receive, send, message)


async def _not_here(scope: Scope, receive: Receive, send: Send, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4404, "reason": "NoApiError"})
        return
    answer = JSONResponse({"code": "NoApiError", "message": message, "problems": []}, 404)
    await answer(scope, receive, send)


def bind(host: str, port: int, option: str = "--proxy-port") -> socket.socket:
    """A listening socket; ``OSError`` naming ``option`` when the port cannot be had.

    Made with ``IPPROTO_TCP`` as its protocol: asyncio turns Nagle's algorithm off only on
    connections whose socket says so (CPython's ``_set_nodelay``), and uvicorn's own sockets say
    0. With Nagle on, a response written as headers then body waits for the client's delayed
    ACK: 40 ms per request on a kept-alive connection (docs/benchmarks.md, the task proxy)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(
            exc.errno,
            f"cannot listen on {host}:{port} ({exc.strerror}): choose another port with "
            f"{option} (0: any free one)",
        ) from exc
    sock.set_inheritable(True)
    return sock
