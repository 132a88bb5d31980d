"""The server: FastAPI app, store migrations, tokens, and the scheduler loop."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from shoal import __version__
from shoal.server.auth import ensure_token_file
from shoal.server.ca import PkiFiles
from shoal.server.context import ApiError, ServerContext
from shoal.server.limits import RequestLimits, json_syntax_problem, unreadable_body
from shoal.server.loop import SchedulerLoop
from shoal.server.openapi_errors import install as document_refusals
from shoal.server.openpai import router as openpai_router
from shoal.server.proxy import routes as proxy_routes
from shoal.server.proxy.http_forward import HttpForwarder
from shoal.server.proxy.listener import PortGate
from shoal.server.proxy.listener import bind as bind_socket
from shoal.server.routers import (
    agent,
    attempt_files,
    backup,
    data,
    images,
    job_shares,
    jobs,
    join,
    metrics,
    nodes,
    session,
    ssh,
    stream,
    system,
    usage,
    users,
    vcs,
    web,
)
from shoal.server.routers import audit as audit_routes
from shoal.server.routers import exec as exec_routes
from shoal.server.routers import install as install_routes
from shoal.server.routers import logs as log_routes
from shoal.server.routers import pools as pool_routes
from shoal.server.scheduler_process import SchedulerProcess
from shoal.server.services import audit, idle_jobs
from shoal.server.services.agents import restart_node_clocks
from shoal.server.services.blobs import PARTIAL_IDLE_S, BlobStore
from shoal.server.services.tunnels import ensure_proxy_key
from shoal.server.settings import ServerSettings
from shoal.server.shared_positions import SharedPositions
from shoal.server.storage import disk_full_answer
from shoal.server.store_news import StoreNewsListener, install_announcer
from shoal.server.tls import https_options, serve_live
from shoal.store.db import Database, home_store, recorded_files_dir

ADMIN_TOKEN_FILE = "admin.token"
AGENT_TOKEN_FILE = "agent.token"
KUBERNETES_TOKEN_FILE = "kubernetes.token"  # the Kubernetes agent's (docs/kubernetes.md)

log = logging.getLogger("shoal.server")


def prepare(settings: ServerSettings) -> ServerContext:
    """Check the settings, create the home directory, migrate the store and make sure the token
    files exist. Raises ``FencingError`` when the node timeout leaves no room for a lease."""
    settings.check_fencing()
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    _keep_private(settings.home)
    url = settings.database_url or home_store(settings.home)
    db = Database(url)
    db.migrate()
    # the store's URL and the files directory as resolved, for the scheduler process too
    files_dir = settings.files_dir or recorded_files_dir(settings.home)
    resolved = dataclasses.replace(settings, database_url=db.url, files_dir=files_dir)
    ctx = ServerContext(settings=resolved, db=db)
    settings = resolved
    ensure_token_file(db, settings.home / ADMIN_TOKEN_FILE, "user", ctx.clock())
    if not settings.tls:  # on the network, agents join with tokens and use node certificates
        ensure_token_file(db, settings.home / AGENT_TOKEN_FILE, "agent", ctx.clock())
    if settings.kubernetes:  # the agent whose nodes are a Kubernetes cluster's, beside the server
        ensure_token_file(db, settings.home / KUBERNETES_TOKEN_FILE, "kubernetes", ctx.clock())
    # uploads a previous run did not finish (in a shared files directory: only dead ones)
    BlobStore(settings.blobs_dir).clear_partial(PARTIAL_IDLE_S if files_dir else 0.0)
    ctx.proxy_key = ensure_proxy_key(settings.home)  # tasks' proxy tokens (docs/proxy.md)
    if not db.is_sqlite:  # its commits' news reach the other servers on the store
        install_announcer(db, ctx.server_id)
    return ctx


def share_the_store(ctx: ServerContext) -> StoreNewsListener | None:
    """On PostgreSQL (several servers may share it): other servers' writes wake this one's long
    polls and scheduler (the listener returned, started), and its API shows the leader's queue
    positions when its own scheduler does not lead."""
    if ctx.db.is_sqlite:
        return None
    ctx.shared_positions = SharedPositions(ctx)
    listener = StoreNewsListener(ctx, ctx.server_id)
    listener.start()
    return listener


def _keep_private(home: Path) -> None:
    """The home (tokens, store, CA key, blobs) is the server's user's alone, whatever made it:
    mode 0700 (docs/security.md). A home of another owner is left as it is (and said)."""
    if home.stat().st_uid != os.geteuid():
        log.warning("%s belongs to another user: its mode is left as it is", home)
        return
    os.chmod(home, 0o700)


def create_app(ctx: ServerContext, run_scheduler: bool = True) -> FastAPI:
    """The app; with ``run_scheduler``, its lifespan runs the scheduler too (in a child process
    or a thread, as ``ctx.settings.scheduler`` says)."""
    loop: SchedulerLoop | SchedulerProcess = (
        SchedulerProcess(ctx) if ctx.settings.scheduler == "process" else SchedulerLoop(ctx)
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Everything loaded so far (modules, the app, mappers) lives as long as the server: keep
        # it out of the collector's full passes, which otherwise walk it again and again.
        gc.freeze()
        if run_scheduler:
            restart_node_clocks(ctx)  # this server's down time is not held against agents
            loop.start()
        culler = asyncio.ensure_future(stop_idle_jobs(ctx))  # docs/notebooks.md
        listener = share_the_store(ctx)
        scaler = start_autoscaler(ctx) if run_scheduler else None  # docs/cloud.md
        yield
        culler.cancel()
        if listener is not None:
            await run_in_threadpool(listener.stop)
        if scaler is not None:
            await run_in_threadpool(scaler.stop)
        await app.state.http_forwarder.aclose()
        watch = getattr(app.state, "change_watch", None)
        if watch is not None:
            await watch.close()
        ctx.commits.stop()  # what was submitted is committed and answered first
        if run_scheduler:
            loop.stop()
        ctx.wake_agents()

    app = FastAPI(
        title="shoal",
        version=__version__,
        description="A training-cluster manager for ML and RL teams.",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load scripts from a CDN; /openapi.json stays
        redoc_url=None,
    )
    app.state.context = ctx
    app.state.http_forwarder = HttpForwarder(ctx)  # the task proxy's tunnels (docs/proxy.md)
    app.add_middleware(RequestLimits, ctx=ctx)  # body sizes and rates (docs/limits.md)
    _include_routers(app)
    app.add_middleware(audit.RememberClient)  # the caller's address for the audit log
    app.add_middleware(PortGate, ctx=ctx)  # the proxy's port serves /proxy/ only
    document_refusals(app)  # /openapi.json: each route's 4xx with shoal's error body

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        body = {"code": exc.code, "message": exc.message, "problems": exc.problems}
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
        headers.update(exc.headers)
        return JSONResponse(body, status_code=exc.status, headers=headers)

    _answer_disk_full(app, ctx, api_error)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"path": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()
        ]
        syntax = [m for m in map(json_syntax_problem, exc.errors()) if m]
        if syntax:  # not JSON at all: a 400 saying where, not a field's validation error
            return JSONResponse(
                {
                    "code": _bad_body_code(request, "InvalidJsonBody"),
                    "message": syntax[0],
                    "problems": problems,
                },
                status_code=400,
            )
        message = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
        return JSONResponse(
            {"code": "InvalidParametersError", "message": message, "problems": problems},
            status_code=400 if _openpai(request) else 422,  # OpenPAI answers 400
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Starlette's own answers (no such route, method not allowed) with a code and a
        message, as every shoal error has."""
        code = "NoApiError" if exc.status_code in (404, 405) else "HttpError"
        message = (
            f"no route {request.method} {request.url.path}"
            if exc.status_code in (404, 405)
            else str(exc.detail)
        )
        if (unreadable := unreadable_body(exc.__cause__)) is not None:
            code, message = _bad_body_code(request, unreadable[0]), unreadable[1]
        return JSONResponse(
            {"code": code, "message": message, "problems": []},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    return app


def start_autoscaler(ctx: ServerContext) -> Any:
    """The cloud pools' autoscaler, when the server has a cloud file (docs/cloud.md); servers
    without one never import the cloud code."""
    if ctx.settings.cloud_file is None:
        return None
    from shoal.cloud.pools import load_cloud  # noqa: PLC0415
    from shoal.server.autoscaling.autoscaler import Autoscaler  # noqa: PLC0415

    return Autoscaler.start_for(ctx, load_cloud(ctx.settings.cloud_file))


async def stop_idle_jobs(ctx: ServerContext) -> None:
    """Every ``idle_sweep_s``: interactive jobs idle past their VC's timeout are warned, then
    stopped (``services.idle_jobs``). A failed sweep is logged; the next one comes."""
    while not ctx.closing:
        await asyncio.sleep(ctx.settings.idle_sweep_s)
        try:
            await run_in_threadpool(idle_jobs.sweep, ctx, ctx.clock())
        except Exception:
            log.exception("checking interactive jobs for idleness failed")


def _include_routers(app: FastAPI) -> None:
    """Every route; the busiest first: agents' reports and polls (every node, every few
    seconds), then submissions and job reads. Routes are matched in this order, and no path of
    one router's prefix is matched by another's."""
    for router in (
        agent.router,
        jobs.router,
        system.router,
        nodes.router,
        pool_routes.router,
        log_routes.router,
        attempt_files.router,
        vcs.router,
        users.router,
        openpai_router,
        usage.router,
        data.router,
        images.router,
        join.router,
        install_routes.router,
        metrics.router,
        session.router,
        stream.router,
        exec_routes.router,
        ssh.router,
        audit_routes.router,
        backup.router,
        proxy_routes.router,
        job_shares.router,
        web.router,  # last: its pages answer any path the API does not
    ):
        app.include_router(router)


def _answer_disk_full(
    app: FastAPI, ctx: ServerContext, api_error: Callable[[Request, ApiError], Awaitable[Response]]
) -> None:
    """A write that met a full disk was rolled back: 507, not 500 (docs/disk.md)."""

    async def disk_full(request: Request, exc: Exception) -> Response:
        answer = disk_full_answer(ctx.settings, exc)
        if answer is None:
            raise exc
        return await api_error(request, answer)

    app.add_exception_handler(OperationalError, disk_full)
    app.add_exception_handler(OSError, disk_full)


def _openpai(request: Request) -> bool:
    return request.url.path.startswith(("/api/v2/", "/rest-server/"))  # openpai/rest_server.py


def _bad_body_code(request: Request, code: str) -> str:
    return "InvalidParametersError" if _openpai(request) else code  # OpenPAI's list of codes


def _proxy_socket(settings: ServerSettings) -> socket.socket:
    """The task proxy's socket; a default port taken since it was chosen gives way to any."""
    try:
        return bind_socket(settings.host, settings.proxy_port or 0)
    except OSError:
        if not settings.proxy_port_fallback:
            raise
        return bind_socket(settings.host, 0)


class ShoalServer(uvicorn.Server):
    """uvicorn's server, telling shoal's long polls to answer as soon as shutdown begins."""

    def __init__(self, config: uvicorn.Config, ctx: ServerContext) -> None:
        super().__init__(config)
        self.ctx = ctx

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """The API's port and, if the settings give one, the task proxy's (docs/proxy.md)."""
        settings = self.ctx.settings
        if sockets is None:
            sockets = [bind_socket(settings.host, settings.port, "--port")]
            if settings.proxy_port is not None:
                sockets.append(_proxy_socket(settings))
                self.ctx.proxy_port = sockets[-1].getsockname()[1]
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.ctx.close()
        super().handle_exit(sig, frame)

    def close(self) -> None:
        self.ctx.close()
        self.should_exit = True


def make_server(ctx: ServerContext, log_level: str = "warning") -> ShoalServer:
    """Plain HTTP in local mode; HTTPS with optional client certificates on the network, its
    certificate and trusted CAs following a CA rotation (``tls.serve_live``)."""
    files = PkiFiles.of(ctx.settings.home)
    tls = https_options(files) if ctx.settings.tls else {}
    config = uvicorn.Config(
        create_app(ctx),
        host=ctx.settings.host,
        port=ctx.settings.port,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
        **tls,
    )
    if ctx.settings.tls:
        config.load()  # makes uvicorn's SSL context, which serve_live makes follow HOME/pki
        assert config.ssl is not None
        serve_live(config.ssl, files)
    return ShoalServer(config, ctx)
