"""The audit log (docs/audit.md): who did what security-relevant thing, from where, and whether it
was allowed.

A change and its audit row are written in one transaction (``record`` adds the row to the
caller's session), so the log never names a change that did not happen nor misses one that did.
Refusals worth knowing (a wrong password, a terminal refused) are written on their own
(``record_refusal``). The caller's address comes from the request through a context variable
that ``deps.get_principal`` sets, so services need no request object.

``detail`` never holds a secret: keys that name one are dropped before the row is written, and
tokens are named by their id, never their value.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.store.models import AuditEventRow

log = logging.getLogger(__name__)
OK = "ok"
REFUSED = "refused"
NOBODY = "-"
SECRET_KEYS = frozenset({"password", "token", "secret", "secrets", "value", "cookie"})
NEW_CLIENT = "token.new_client"
SEEN_CLIENTS_LIMIT = 20_000  # the in-memory set of seen clients is cleared when it gets there


@dataclass(frozen=True, slots=True)
class Client:
    """Where a request came from: its address and what it says it is (User-Agent)."""

    address: str = NOBODY
    agent: str = ""


NO_CLIENT = Client()
_client: ContextVar[Client | None] = ContextVar("shoal_audit_client", default=None)
_caller: ContextVar[Principal | None] = ContextVar("shoal_audit_caller", default=None)


def set_client(address: str | None, agent: str | None) -> None:
    """Remember the current request's caller (``deps.get_principal``)."""
    _client.set(Client(address or NOBODY, (agent or "")[:120]))


def current_client() -> Client:
    return _client.get() or NO_CLIENT


def set_caller(principal: Principal) -> None:
    """Remember who the current request is (``deps.get_principal``): the actor of a service that
    is not handed one (``record`` with ``actor=None``)."""
    _caller.set(principal)


def actor_of(principal: Principal | None) -> str:
    return NOBODY if principal is None else principal.user


def _clean(detail: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (detail or {}).items() if k.lower() not in SECRET_KEYS}


def record(
    session: Session,
    now: float,
    actor: Principal | str | None,
    action: str,
    target: str,
    detail: dict[str, Any] | None = None,
    outcome: str = OK,
) -> None:
    """Add one audit row to ``session``: it commits (or rolls back) with the change itself."""
    if actor is None:
        actor = _caller.get()
    name = actor if isinstance(actor, str) else actor_of(actor)
    client = current_client()
    details = _clean(detail)
    if client.agent:
        details.setdefault("userAgent", client.agent)
    session.add(
        AuditEventRow(
            at=now,
            actor=name[:64],
            action=action,
            target=target[:256],
            outcome=outcome,
            client=client.address[:64],
            detail=details,
        )
    )


def record_refusal(
    ctx: ServerContext,
    actor: Principal | str | None,
    action: str,
    target: str,
    reason: str,
    detail: dict[str, Any] | None = None,
) -> None:
    """A refused attempt, in a transaction of its own (the refusal itself changed nothing)."""
    with ctx.db.write() as session:
        record(
            session,
            ctx.clock(),
            actor,
            action,
            target,
            {**(detail or {}), "reason": reason},
            outcome=REFUSED,
        )


def unseen_client(ctx: ServerContext, principal: Principal) -> tuple[int, str, str] | None:
    """The (token, address, User-Agent) of this request if this process has not seen it yet
    (then ``note_token_use`` checks the store); None for a known one: a set lookup per request."""
    if principal.token_id is None:
        return None
    client = current_client()
    key = (principal.token_id, client.address, client.agent)
    return None if key in ctx.token_clients else key


def note_token_use(ctx: ServerContext, principal: Principal, key: tuple[int, str, str]) -> None:
    """Write ``token.new_client`` unless this token was already used from this client (the
    store keeps it across restarts), then remember the client in memory."""
    target = f"token {key[0]}"
    try:
        _write_new_client(ctx, principal, key, target)
    except OperationalError as exc:  # a full disk or a busy store must not refuse a read
        log.warning("audit: could not record %s of %s from %s: %s", NEW_CLIENT, target, key[1], exc)
        return
    if len(ctx.token_clients) >= SEEN_CLIENTS_LIMIT:
        ctx.token_clients.clear()
    ctx.token_clients.add(key)


def _write_new_client(
    ctx: ServerContext, principal: Principal, key: tuple[int, str, str], target: str
) -> None:
    with ctx.db.write() as session:
        seen = session.scalar(
            select(
                exists().where(
                    AuditEventRow.action == NEW_CLIENT,
                    AuditEventRow.target == target,
                    AuditEventRow.client == key[1][:64],
                    AuditEventRow.detail["userAgent"].as_string() == key[2],
                )
            )
        )
        if not seen:
            detail = {"kind": principal.kind, "userAgent": key[2]}
            record(session, ctx.clock(), principal, NEW_CLIENT, target, detail)


def record_alone(
    ctx: ServerContext,
    actor: Principal | str | None,
    action: str,
    target: str,
    detail: dict[str, Any] | None = None,
) -> None:
    """An action that changed nothing in the store (a backup taken), in its own transaction."""
    with ctx.db.write() as session:
        record(session, ctx.clock(), actor, action, target, detail)


class RememberClient:
    """ASGI middleware: every HTTP request's address and User-Agent, for the rows its services
    write (a sign-in has no principal yet, so ``deps.get_principal`` cannot be the one place)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            client = scope.get("client")
            agent = next((v for k, v in scope["headers"] if k == b"user-agent"), b"")
            set_client(client[0] if client else None, agent.decode("latin-1"))
        await self.app(scope, receive, send)


@dataclass(frozen=True)
class AuditQuery:
    """Which rows to read: newest first, at most ``limit``."""

    since: float | None = None
    until: float | None = None
    actor: str | None = None
    action: str | None = None  # an exact action, or a prefix ending in "." (``token.``)
    outcome: str | None = None
    limit: int = 100


def read_events(ctx: ServerContext, caller: Principal, query: AuditQuery) -> list[AuditEventRow]:
    """The audit log, for admins only (403 ``ForbiddenUserError`` otherwise)."""
    if not (caller.is_admin and caller.kind == "user"):
        raise ApiError(
            403, "ForbiddenUserError", "only admins (with a user token) read the audit log"
        )
    statement = select(AuditEventRow).order_by(AuditEventRow.id.desc()).limit(query.limit)
    if query.since is not None:
        statement = statement.where(AuditEventRow.at >= query.since)
    if query.until is not None:
        statement = statement.where(AuditEventRow.at < query.until)
    if query.actor:
        statement = statement.where(AuditEventRow.actor == query.actor)
    if query.action and query.action.endswith("."):
        statement = statement.where(AuditEventRow.action.startswith(query.action, autoescape=True))
    elif query.action:
        statement = statement.where(AuditEventRow.action == query.action)
    if query.outcome:
        statement = statement.where(AuditEventRow.outcome == query.outcome)
    with ctx.db.read() as session:
        return list(session.scalars(statement))
