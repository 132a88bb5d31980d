"""Exec sessions (docs/terminal.md): a command in a running task's environment over WebSockets,
for `shoal job exec` and the dashboard's terminal, and their audit log.

- ``WS /api/v1/jobs/{job}/exec``: the user's side. Query: ``task=ROLE/INDEX`` (default: index 0 of
  the job's first role), ``tty``, ``cols``, ``rows``, and the command as repeated ``cmd`` (default:
  bash where the task has it, else sh).
- ``WS /api/v1/agent/exec/{session_id}``: the agent's side, opened by the agent once its long
  poll delivered the session (``OrdersResponse.exec``).
- ``GET /api/v1/exec-sessions``: the audit log.

Every WebSocket is accepted first; a refusal is then an error frame (``{"type": "error", "code",
"message"}``) and a close with code 4000 + the HTTP status the API would answer (4401, 4403,
4404, 4409, 4422, 4426, 4500, 4502, 4504) and the error code as its reason.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, WebSocket
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams

from shoal.protocol import (
    DEFAULT_EXEC_ARGV,
    EXEC_ATTACH_S,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    exec_control,
)
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.deps import Caller, Context
from shoal.server.exec_hub import (
    AGENT_LOST,
    CLOSED_BY_USER,
    EXITED,
    NOT_ATTACHED,
    REFUSED_BY_AGENT,
    SERVER_STOPPED,
    ExecHub,
    Outcome,
    relay,
    wait_for_agent,
)
from shoal.server.exec_schemas import ExecSessionOut
from shoal.server.services import audit, exec_sessions
from shoal.server.services.exec_sessions import ExecRequest, ExecTarget
from shoal.server.ws_auth import websocket_agent, websocket_principal

router = APIRouter(tags=["exec"])
MAX_ARGS = 256
TRUE, FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


@router.websocket("/api/v1/jobs/{job}/exec")
async def exec_in_task(websocket: WebSocket, job: str) -> None:
    """Run a command in a running task of ``job`` and relay its terminal (see the module doc)."""
    ctx: ServerContext = websocket.app.state.context
    await websocket.accept()
    session_id = uuid.uuid4().hex
    client = websocket.client
    audit.set_client(client.host if client else None, websocket.headers.get("user-agent"))
    principal: Principal | None = None
    try:
        principal = await websocket_principal(websocket, ctx)
        request = parse_request(websocket.query_params)
        ctx.exec_hub.reserve(session_id)
        target = await run_in_threadpool(_begin, ctx, principal, job, request, session_id)
    except ApiError as exc:
        ctx.exec_hub.close(session_id)
        if principal is not None:  # who was refused a terminal, and why
            await run_in_threadpool(
                audit.record_refusal, ctx, principal, "exec.open", f"job {job}", exc.code
            )
        await refuse(websocket, exc)
        return
    except BaseException:
        ctx.exec_hub.close(session_id)
        raise
    await _run(ctx, websocket, target)


def _begin(
    ctx: ServerContext, principal: Principal, job: str, request: ExecRequest, session_id: str
) -> ExecTarget:
    hub = ctx.exec_hub
    if not hub.swept:  # sessions an earlier server process left open
        exec_sessions.close_orphans(ctx, hub.live_ids())
        hub.swept = True
    return exec_sessions.begin(ctx, principal, job, request, session_id)


async def _run(ctx: ServerContext, user: WebSocket, target: ExecTarget) -> None:
    """Offer the session to the task's agent, wait for it to attach, relay, record the end."""
    session_id = target.order.session_id
    live = ctx.exec_hub.open(target.order, target.node)
    ctx.wake_agents([target.node])
    outcome = Outcome(NOT_ATTACHED)
    try:
        agent, early, gone = await wait_for_agent(user, live, EXEC_ATTACH_S)
        if gone:
            outcome = Outcome(CLOSED_BY_USER)
        elif agent is None:
            await refuse(user, _not_attached(target))
        else:
            outcome = await relay(user, agent, early)
            with contextlib.suppress(Exception):  # it may be gone already
                await agent.close(1000)
            await _close_user(user, outcome, target)
    finally:
        ctx.exec_hub.close(session_id)  # the agent's handler returns
        if ctx.closing and outcome.reason in (AGENT_LOST, CLOSED_BY_USER):
            outcome.reason = SERVER_STOPPED
        await run_in_threadpool(
            exec_sessions.end, ctx, session_id, outcome.reason, outcome.exit_code
        )


def _not_attached(target: ExecTarget) -> ApiError:
    return ApiError(
        504,
        "AgentDidNotAttachError",
        f"the agent of node {target.node} did not take the session within {EXEC_ATTACH_S:g} s: "
        "is it running and reporting (`shoal node list`)? Try again",
    )


async def _close_user(user: WebSocket, outcome: Outcome, target: ExecTarget) -> None:
    """End the user's side as the session ended: the exit frame was relayed already."""
    if outcome.reason == EXITED:
        with contextlib.suppress(Exception):
            await user.close(1000, "exited")
    elif outcome.reason == REFUSED_BY_AGENT:  # its error frame was relayed already
        with contextlib.suppress(Exception):
            await user.close(4500, str((outcome.error or {}).get("code", "ExecRefusedError")))
    elif outcome.reason == AGENT_LOST:
        lost = ApiError(
            502,
            "AgentLostError",
            f"the connection to the agent of node {target.node} ended before the command did; "
            "the command was ended with it",
        )
        await refuse(user, lost)


@router.websocket("/api/v1/agent/exec/{session_id}")
async def agent_attach(websocket: WebSocket, session_id: str) -> None:
    """An agent attaches to a session its long poll delivered; the user's handler relays."""
    ctx: ServerContext = websocket.app.state.context
    await attach_agent(websocket, ctx.exec_hub, session_id)


async def attach_agent(websocket: WebSocket, hub: ExecHub[Any], session_id: str) -> None:
    """The agent's side of a session of ``hub`` (exec, or a tunnel): checked (its protocol,
    its credentials, its node), told ``attached``, handed to the session, held until it ends."""
    ctx: ServerContext = websocket.app.state.context
    version = (PROTOCOL_HEADER.lower().encode(), str(PROTOCOL_VERSION).encode())
    await websocket.accept(headers=[version])
    try:
        agent = await websocket_agent(websocket, ctx)
        live = exec_sessions.check_attach(hub.find(session_id), agent, session_id)
    except ApiError as exc:
        await refuse(websocket, exc)
        return
    await websocket.send_text(exec_control("attached"))  # before any frame the relay sends
    live.attach(websocket)
    await live.finished.wait()


async def refuse(websocket: WebSocket, exc: ApiError) -> None:
    """The error frame, then a close with 4000 + the HTTP status and the error code."""
    with contextlib.suppress(Exception):  # the peer may be gone
        await websocket.send_text(exec_control("error", code=exc.code, message=exc.message))
        await websocket.close(4000 + exc.status, exc.code[:120])


def parse_request(params: QueryParams) -> ExecRequest:
    """The query of ``WS /api/v1/jobs/{job}/exec``; 422 naming the parameter otherwise."""
    argv = params.getlist("cmd") or list(DEFAULT_EXEC_ARGV)
    if not argv[0] or len(argv) > MAX_ARGS:
        raise invalid_param("cmd", f"give a command (1 to {MAX_ARGS} `cmd` parameters, the first "
                       "not empty), or none for a shell")  # fmt: skip
    tty = params.get("tty", "false").lower()
    if tty not in TRUE + FALSE:
        raise invalid_param("tty", f"expected true or false, got {tty!r}")
    return ExecRequest(
        task=task_param(params.get("task")),
        argv=argv,
        tty=tty in TRUE,
        cols=_size(params, "cols", 80),
        rows=_size(params, "rows", 24),
    )


def task_param(text: str | None) -> tuple[str, int] | None:
    if text is None or text == "":
        return None
    role, _, index = text.partition("/")
    if not role or not (index or "0").isdigit():
        raise invalid_param("task", f"expected ROLE/INDEX (e.g. worker/0), got {text!r}")
    return role, int(index or 0)


def _size(params: QueryParams, name: str, default: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise invalid_param(name, f"expected a number from 1 to 1000, got {text!r}")
    return int(text)


def invalid_param(name: str, message: str) -> ApiError:
    return ApiError(422, "InvalidParametersError", f"{name}: {message}", [
        {"path": name, "message": message}])  # fmt: skip


@router.get("/api/v1/exec-sessions", response_model=list[ExecSessionOut])
def exec_session_log(
    ctx: Context,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    job: Annotated[str | None, Query(description="Only this job's sessions (its id).")] = None,
    user: Annotated[str | None, Query(description="Only this user's (admins).")] = None,
) -> list[ExecSessionOut]:
    """The audit log of exec sessions (`shoal job exec`, the dashboard's terminal), newest
    first: an admin sees everyone's, anyone else their own. Sessions a server stopped without
    recording their end are closed here as ``server-restarted``."""
    live = ctx.exec_hub.live_ids()
    rows = exec_sessions.audit_log(ctx, caller, live, limit, job, user)
    return [ExecSessionOut.of(row) for row in rows]
