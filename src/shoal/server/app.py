"""The server: FastAPI app, store migrations, tokens, and the scheduler loop."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import FrameType

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shoal import __version__
from shoal.server.auth import ensure_token_file
from shoal.server.ca import PkiFiles
from shoal.server.context import ApiError, ServerContext
from shoal.server.loop import SchedulerLoop
from shoal.server.openapi_errors import install as document_refusals
from shoal.server.openpai import router as openpai_router
from shoal.server.routers import (
    agent,
    data,
    images,
    jobs,
    join,
    metrics,
    nodes,
    session,
    stream,
    system,
    usage,
    users,
    vcs,
    web,
)
from shoal.server.routers import exec as exec_routes
from shoal.server.routers import logs as log_routes
from shoal.server.scheduler_process import SchedulerProcess
from shoal.server.services.agents import restart_node_clocks
from shoal.server.services.blobs import BlobStore
from shoal.server.settings import ServerSettings
from shoal.server.tls import https_options
from shoal.store.db import Database, sqlite_url

ADMIN_TOKEN_FILE = "admin.token"
AGENT_TOKEN_FILE = "agent.token"

log = logging.getLogger("shoal.server")


def prepare(settings: ServerSettings) -> ServerContext:
    """Check the settings, create the home directory, migrate the store and make sure the token
    files exist. Raises ``FencingError`` when the node timeout leaves no room for a lease."""
    settings.check_fencing()
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    db = Database(settings.database_url or sqlite_url(settings.home))
    db.migrate()
    ctx = ServerContext(settings=settings, db=db)
    ensure_token_file(db, settings.home / ADMIN_TOKEN_FILE, "user", ctx.clock())
    if not settings.tls:  # on the network, agents join with tokens and use node certificates
        ensure_token_file(db, settings.home / AGENT_TOKEN_FILE, "agent", ctx.clock())
    BlobStore(settings.blobs_dir).clear_partial()  # uploads a previous run did not finish
    return ctx


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
        yield
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
    app.include_router(jobs.router)  # first: submissions and job reads are the busiest routes
    app.include_router(system.router)
    app.include_router(nodes.router)
    app.include_router(log_routes.router)
    app.include_router(agent.router)
    app.include_router(vcs.router)
    app.include_router(users.router)
    app.include_router(openpai_router)
    app.include_router(usage.router)
    app.include_router(data.router)
    app.include_router(images.router)
    app.include_router(join.router)
    app.include_router(metrics.router)
    app.include_router(session.router)
    app.include_router(stream.router)
    app.include_router(web.router)
    app.include_router(exec_routes.router)
    document_refusals(app)  # /openapi.json: each route's 4xx with shoal's error body

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        body = {"code": exc.code, "message": exc.message, "problems": exc.problems}
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
        headers.update(exc.headers)
        return JSONResponse(body, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"path": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()
        ]
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
        return JSONResponse(
            {"code": code, "message": message, "problems": []},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    return app


def _openpai(request: Request) -> bool:
    return request.url.path.startswith("/api/v2/")


class ShoalServer(uvicorn.Server):
    """uvicorn's server, telling shoal's long polls to answer as soon as shutdown begins."""

    def __init__(self, config: uvicorn.Config, ctx: ServerContext) -> None:
        super().__init__(config)
        self.ctx = ctx

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.ctx.close()
        super().handle_exit(sig, frame)

    def close(self) -> None:
        self.ctx.close()
        self.should_exit = True


def make_server(ctx: ServerContext, log_level: str = "warning") -> ShoalServer:
    """Plain HTTP in local mode; HTTPS with optional client certificates on the network."""
    tls = https_options(PkiFiles.of(ctx.settings.home)) if ctx.settings.tls else {}
    config = uvicorn.Config(
        create_app(ctx),
        host=ctx.settings.host,
        port=ctx.settings.port,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
        **tls,
    )
    return ShoalServer(config, ctx)
