"""JSON over HTTP for the client, on the standard library's http.client.

The CLI makes one or two calls per run, so what matters is start-up: http.client loads in a few
milliseconds, where httpx (with its CLI, click, rich and pygments, and an SSL context built even
for http:// URLs) costs ~0.2 s of every `shoal job list`. Connections are kept alive, one per
thread, and a request on a connection the server closed while idle is retried once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

if TYPE_CHECKING:  # http.client is imported at the first request: `shoal --help` never needs it
    import http.client
    from email.message import Message


class TransportError(OSError):
    """No answer: the server could not be reached, or the connection broke."""


@dataclass(frozen=True)
class Response:
    status_code: int
    reason_phrase: str
    headers: Message
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _query(params: dict[str, Any] | None) -> str:
    pairs: list[tuple[str, str]] = []
    for key, value in (params or {}).items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if item is None:
                continue
            pairs.append((key, ("true" if item else "false") if isinstance(item, bool) else item))
    return "?" + urlencode(pairs) if pairs else ""


class JsonHttp:
    def __init__(self, base_url: str, headers: dict[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"{base_url!r} is not an http:// or https:// URL")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._headers = {"Accept": "application/json", "User-Agent": "shoal", **headers}
        self._timeout = timeout
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        import http.client

        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json: Any = None,
    ) -> Response:
        import http.client

        body = None if json is None else _dumps(json)
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        target = self._prefix + path + _query(params)
        for attempt in (1, 2):
            reused = getattr(self._local, "conn", None) is not None
            conn = self._connection()
            try:
                conn.request(method, target, body=body, headers=headers)
                answer = conn.getresponse()
                content = answer.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                stale = isinstance(
                    exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
                )
                if reused and stale and attempt == 1:
                    continue  # the server closed the idle connection: once more on a new one
                raise TransportError(str(exc)) from exc
            if answer.will_close:
                self.close()
            return Response(answer.status, answer.reason, answer.headers, content)
        raise AssertionError("unreachable")  # pragma: no cover


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode("utf-8")
