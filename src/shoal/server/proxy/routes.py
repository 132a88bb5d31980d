"""The routes of tunnels and of the task proxy (docs/proxy.md).

- ``WS /api/v1/jobs/{job}/tunnel?task=ROLE/INDEX&port=LABEL|NUMBER``: a raw byte stream to a
  task's port (`shoal job port-forward`, `shoal job ssh`); binary frames both ways.
- ``WS /api/v1/agent/tunnel/{session_id}``: the agent's side, opened once its long poll
  delivered the tunnel (``OrdersResponse.tunnels``).
- ``/proxy/{job}/{role}/{index}/{label}/...``: HTTP (any method) and WebSocket to the task's port
  labelled ``label``, with the whole path; served on the proxy's own port only (``listener``).

Refusals on a WebSocket are an error frame and a close with 4000 + the HTTP status (as exec's);
over HTTP, shoal's JSON error body (or, for a browser, a short page saying what to do).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import time

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from shoal.protocol import exec_control, tunnel_control
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.deps import get_user, principal_of_token
from shoal.server.proxy.http_forward import HttpForwarder
from shoal.server.proxy.streams import TaskStream, open_stream
from shoal.server.proxy.ws_forward import forward_websocket
from shoal.server.routers.exec import attach_agent, invalid_param, refuse, task_param
from shoal.server.services import tunnels
from shoal.server.services.tunnels import TunnelTarget
from shoal.server.services.web_sessions import SESSION_COOKIE
from shoal.server.ws_auth import websocket_principal

router = APIRouter(tags=["proxy"])
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@router.websocket("/api/v1/jobs/{job}/tunnel")
async def tunnel(websocket: WebSocket, job: str) -> None:
    """A byte stream to a running task's port (see the module doc)."""
    ctx: ServerContext = websocket.app.state.context
    await websocket.accept()
    try:
        principal = await websocket_principal(websocket, ctx)
        task = task_param(websocket.query_params.get("task"))
        port = websocket.query_params.get("port", "")
        if not port:
            raise invalid_param("port", "name the task's port: its label (e.g. ssh) or its number")
        target = await run_in_threadpool(tunnels.resolve, ctx, principal, job, task, port)
        stream = await open_stream(ctx, target)
    except ApiError as exc:
        await refuse(websocket, exc)
        return
    await websocket.send_text(exec_control("connected", port=target.port, node=target.node))
    try:
        await _splice(websocket, stream)
    finally:
        await stream.aclose()
        with contextlib.suppress(Exception):
            await websocket.close(1000)


async def _splice(user: WebSocket, stream: TaskStream) -> None:
    async def upstream() -> None:
        while True:
            message = await user.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes"):
                await stream.write(message["bytes"])
            elif (tunnel_control(message.get("text") or "") or {}).get("type") == "eof":
                await stream.write_eof()

    async def downstream() -> None:
        while data := await stream.read():
            await user.send_bytes(data)

    tasks = {asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())}
    _, pending = await asyncio.wait(tasks, return_when="FIRST_COMPLETED")
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


@router.websocket("/api/v1/agent/tunnel/{session_id}")
async def agent_attach(websocket: WebSocket, session_id: str) -> None:
    """An agent attaches to a tunnel its long poll delivered; ``open_stream`` takes it over."""
    ctx: ServerContext = websocket.app.state.context
    await attach_agent(websocket, ctx.tunnel_hub, session_id)


# ---- the proxy ----

PROXY_PATH = "/proxy/{job}/{role}/{index}/{label}"


@router.api_route(PROXY_PATH, methods=METHODS, include_in_schema=False)
async def proxy_root(request: Request) -> Response:
    """The port's root without its slash: where apps expect it, with one."""
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"{request.url.path}/{query}", status_code=307)


@router.api_route(PROXY_PATH + "/{rest:path}", methods=METHODS, include_in_schema=False)
async def proxy_http(request: Request, job: str, role: str, index: str, label: str) -> Response:
    ctx: ServerContext = request.app.state.context
    try:
        principal = await _http_principal(request, ctx)
        target = await _resolved(ctx, principal, job, (role, _index(index)), label)
        ctx.proxy_activity[target.job_id] = ctx.clock()  # the idle timeout (docs/notebooks.md)
        forwarder: HttpForwarder = request.app.state.http_forwarder
        return await forwarder.forward(request, target, _token(ctx, target))
    except ApiError as exc:
        return _refusal(request, exc)
    except Exception as exc:  # the task's app broke the connection, or spoke no HTTP
        if type(exc).__module__.split(".")[0] != "httpcore":
            raise
        message = f"the task's app at {label} did not answer properly: {exc or type(exc).__name__}"
        return _refusal(request, ApiError(502, "BadGatewayError", message))


@router.websocket(PROXY_PATH + "/{rest:path}")
async def proxy_websocket(
    websocket: WebSocket, job: str, role: str, index: str, label: str
) -> None:
    ctx: ServerContext = websocket.app.state.context
    try:
        principal = await websocket_principal(websocket, ctx)
        target = await run_in_threadpool(
            tunnels.resolve, ctx, principal, job, (role, _index(index)), label
        )
        stream = await open_stream(ctx, target)
    except ApiError as exc:
        await websocket.accept()
        await refuse(websocket, exc)
        return
    try:

        def touch() -> None:  # each message is activity (docs/notebooks.md, the idle timeout)
            ctx.proxy_activity[target.job_id] = ctx.clock()

        touch()
        await forward_websocket(websocket, stream, target, _token(ctx, target), touch)
    except WebSocketDisconnect:
        pass
    finally:
        await stream.aclose()


RESOLVED_S = 2.0  # how long a page's requests reuse one check of who may reach which port
_resolved_cache: dict[tuple[object, ...], tuple[float, TunnelTarget]] = {}


async def _resolved(
    ctx: ServerContext, principal: Principal, job: str, task: tuple[str, int], label: str
) -> TunnelTarget:
    """``tunnels.resolve``, its answer reused for ``RESOLVED_S``: a page's burst of requests
    reads the store once (the agent still checks that the attempt runs and the port is its; a
    change of a job's shares starts afresh)."""
    key = (id(ctx), ctx.shares_version, principal.user, principal.is_admin, job, task, label)
    now = time.monotonic()
    hit = _resolved_cache.get(key)
    if hit is not None and now - hit[0] < RESOLVED_S:
        return hit[1]
    target = await run_in_threadpool(tunnels.resolve, ctx, principal, job, task, label)
    if len(_resolved_cache) > 4096:
        _resolved_cache.clear()
    _resolved_cache[key] = (now, target)
    return target


def _token(ctx: ServerContext, target: TunnelTarget) -> str:
    return tunnels.proxy_token(ctx.proxy_key, target.attempt_id)


async def _http_principal(request: Request, ctx: ServerContext) -> Principal:
    """A Bearer token (curl, scripts) or the dashboard's session cookie (a browser). No CSRF
    header is asked of a cookie's state-changing calls here: they are the app's own (Jupyter
    checks its XSRF cookie), and the cookie is ``SameSite=Strict``, so other sites' pages
    cannot send it."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return await get_user(await principal_of_token(ctx, token.strip()))
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        return await get_user(await principal_of_token(ctx, cookie, session=True))
    raise ApiError(
        401,
        "UnauthorizedUserError",
        "sign in to the dashboard first (its session opens the task's pages), or send a "
        "Bearer token",
    )


def _refusal(request: Request, exc: ApiError) -> Response:
    """shoal's error body; a browser's page navigation gets a page with the same words."""
    if "text/html" in request.headers.get("accept", ""):
        page = (
            f"<!doctype html><title>shoal: {html.escape(exc.code)}</title>"
            f"<h1>{exc.status} {html.escape(exc.code)}</h1><p>{html.escape(exc.message)}</p>"
        )
        return HTMLResponse(page, status_code=exc.status)
    body = {"code": exc.code, "message": exc.message, "problems": exc.problems}
    return JSONResponse(body, status_code=exc.status)


def _index(text: str) -> int:
    if not text.isdigit():
        raise invalid_param("index", f"expected the task's index (a number), got {text!r}")
    return int(text)
