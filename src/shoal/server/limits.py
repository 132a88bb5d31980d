"""Request limits at the HTTP envelope (docs/limits.md): body sizes (413) and per-user rates
(429, ``rate_limits``), checked by one ASGI middleware before a route reads anything.

A body announced larger than its limit (``Content-Length``) is refused before a byte of it is
read; a body without a length (chunked) is counted as it streams and refused at the first chunk
past the limit. Which limit applies is a matter of the route:

- ``PUT /api/v1/code/...``: code archives, ``max_upload_bytes``;
- ``PUT /api/v1/data/...`` and ``PUT /api/v1/images/...``: data sets and images, streamed to
  disk, ``max_push_bytes``;
- ``/api/v1/agent/...`` called by an agent or a node: none (log uploads grow with the node's
  tasks; the protocol bounds them);
- everything else (job submissions, JSON and YAML bodies): ``max_body_bytes``.

Also here: what to tell a client whose body could not be parsed (not UTF-8, nested too deep,
not JSON), for the app's error handlers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shoal.server.auth import Principal, look_up_token
from shoal.server.context import ServerContext
from shoal.server.rate_limits import RateLimits, Refusal
from shoal.server.services.web_sessions import SESSION_COOKIE
from shoal.server.tls import peer_certificate

# The largest integer a query parameter may carry into a query: SQLite's INTEGER (a bigger one
# is a 422 naming the parameter, not an OverflowError).
SQL_INT_MAX = 2**63 - 1
AGENT_PREFIX = "/api/v1/agent/"
OPENPAI_PREFIX = "/api/v2/"
EXEMPT_KINDS = frozenset({"agent", "kubernetes", "node"})
JsonBody = dict[str, Any]
HeaderMap = dict[str, str]
Answer = tuple[int, JsonBody, HeaderMap]  # status, body, headers


@dataclass(frozen=True)
class BodyLimit:
    size: int  # bytes
    what: str
    setting: str
    option: str  # the `shoal server start` option that changes it

    def message(self, size: int | None) -> str:
        seen = f"is {size} bytes" if size is not None else "(sent without a length) goes on"
        return (
            f"{self.what} {seen}, past the server's limit of {self.size} bytes "
            f"({_mib(self.size)}; setting {self.setting}): send less, or ask the server's "
            f"operator to raise it with `shoal server start {self.option} BYTES`"
        )


def body_limit(ctx: ServerContext, method: str, path: str, agent: bool) -> BodyLimit | None:
    """The limit on this request's body (None: no limit)."""
    settings = ctx.settings
    if method == "PUT" and path.startswith("/api/v1/code/"):
        what, size, setting, option = (
            "the code archive (list big files in .shoalignore)",
            settings.max_upload_bytes,
            "max_upload_bytes",
            "--max-upload",
        )
    elif method == "PUT" and path.startswith(("/api/v1/data/", "/api/v1/images/")):
        what, size, setting = "the upload", settings.max_push_bytes, "max_push_bytes"
        option = "--max-push"
    elif (agent and path.startswith(AGENT_PREFIX)) or path.startswith("/proxy/"):
        return None  # an agent's reports; a task's app (its bodies are its own: docs/proxy.md)
    else:
        what, size, setting = "the request body", settings.max_body_bytes, "max_body_bytes"
        option = "--max-body"
    return BodyLimit(size, what, setting, option) if size > 0 else None


class BodyTooLarge(HTTPException):
    """Raised into the route that reads past the limit; the middleware answers the 413."""

    def __init__(self) -> None:
        super().__init__(status_code=413, detail="request body too large")


class RequestLimits:
    """The ASGI middleware: rates first (cheap, from the caller's credential), then sizes."""

    def __init__(self, app: ASGIApp, ctx: ServerContext) -> None:
        self.app = app
        self.ctx = ctx
        self.rates = RateLimits(ctx.settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        caller = await self._caller(scope, path)
        refusal = self._rate(caller, method, path)
        if refusal is not None:
            await _answer(scope, receive, send, *_too_many(refusal))
            return
        agent = isinstance(caller, Principal) and caller.kind in EXEMPT_KINDS
        limit = body_limit(self.ctx, method, path, agent)
        if limit is None:
            await self.app(scope, receive, send)
            return
        announced = _content_length(scope)
        if announced is not None and announced > limit.size:
            await _answer(scope, receive, send, *_too_large(limit, announced, path))
            return
        await _CountedBody(self.app, limit).run(scope, receive, send)

    async def _caller(self, scope: Scope, path: str) -> Principal | str:
        """The principal of the request's credential, else the client's address. Looked up
        only when a limit depends on it; a lookup fills the token cache the route then uses."""
        if peer_certificate(scope) is not None:  # verified against the cluster's CA
            return Principal(user="", is_admin=False, kind="node")
        token = _credential(scope)
        if token and (self.rates.enabled or path.startswith(AGENT_PREFIX)):
            principal = await look_up_token(self.ctx.db, token, self.ctx.clock())
            if principal is not None:
                return principal
        client = scope.get("client")
        return str(client[0]) if client else "unknown"

    def _rate(self, caller: Principal | str, method: str, path: str) -> Refusal | None:
        if not self.rates.enabled:
            return None
        if isinstance(caller, str):  # no valid credential: by address (bounds guessing)
            return self.rates.check_anonymous(caller)
        if caller.is_admin or caller.kind in EXEMPT_KINDS:
            return None
        return self.rates.check_user(caller.user, method, path)


class _CountedBody:
    """Runs the app with a ``receive`` that counts the body and stops it past the limit; the
    app's own answer to that is dropped and a 413 sent instead."""

    def __init__(self, app: ASGIApp, limit: BodyLimit) -> None:
        self.app = app
        self.limit = limit
        self.seen = 0
        self.over = False
        self.started = False

    async def run(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self.seen += len(message.get("body", b""))
                if self.seen > self.limit.size:
                    self.over = True
                    raise BodyTooLarge
            return message

        async def guarded(message: Message) -> None:
            if self.over and not self.started:
                return  # the route's answer to the cut-off body; the 413 follows
            self.started = self.started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not self.over or self.started:
                raise
        if self.over and not self.started:
            await _answer(scope, receive, send, *_too_large(self.limit, None, scope["path"]))


def _credential(scope: Scope) -> str | None:
    headers = Headers(scope=scope)
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == SESSION_COOKIE and value:
            return value
    return None


def _content_length(scope: Scope) -> int | None:
    value = Headers(scope=scope).get("content-length", "")
    return int(value) if value.isdigit() else None


def _too_large(limit: BodyLimit, size: int | None, path: str) -> Answer:
    code = "InvalidParametersError" if path.startswith(OPENPAI_PREFIX) else "BodyTooLarge"
    body = {"code": code, "message": limit.message(size), "problems": []}
    return 413, body, {"Connection": "close"}


def _too_many(refusal: Refusal) -> Answer:
    body = {"code": "RateLimited", "message": refusal.message(), "problems": []}
    return 429, body, {"Retry-After": str(refusal.retry_after_s)}


async def _answer(
    scope: Scope, receive: Receive, send: Send, status: int, body: JsonBody, headers: HeaderMap
) -> None:
    await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):g} MiB"


# What went wrong with a body the app could not parse (its error handlers ask).


def unreadable_body(cause: BaseException | None) -> tuple[str, str] | None:
    """(code, message) for the exception behind FastAPI's "error parsing the body", if known."""
    if isinstance(cause, UnicodeDecodeError):
        return (
            "BodyNotUtf8",
            f"the body is not UTF-8 text (byte {cause.start}: {cause.reason}): send JSON "
            "encoded as UTF-8",
        )
    if isinstance(cause, RecursionError):
        return (
            "BodyTooDeep",
            "the JSON body is nested too deeply to read: send objects and arrays nested at "
            "most a few hundred levels deep",
        )
    return None


def json_syntax_problem(error: dict[str, Any]) -> str | None:
    """A message for FastAPI's "JSON decode error" (a validation error of type json_invalid)."""
    if error.get("type") != "json_invalid":
        return None
    detail = (error.get("ctx") or {}).get("error", "")
    where = error["loc"][1] if len(error.get("loc", ())) > 1 else "?"
    return (
        f"the body is not valid JSON ({detail} at character {where}): send a JSON object "
        "with Content-Type: application/json"
    )
