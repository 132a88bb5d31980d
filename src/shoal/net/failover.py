"""Several servers of one cluster behind one HTTP client (docs/postgresql.md, "Several servers").

Agents (``--server``) and the CLI (a context's server, ``$SHOAL_URL``) accept a comma-separated
list of server URLs. ``FailoverTransport`` sends each request to the server that answered last;
a request that could not even connect (refused, unreachable, timed out connecting) is sent to
the next server in the list, so no request is sent twice to a server that may have acted on it.
The servers must share the cluster's CA (their certificates name their own hosts).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import httpx

_UNREACHED = (httpx.ConnectError, httpx.ConnectTimeout)


def server_urls(value: str) -> list[str]:
    """The URLs in a comma-separated ``--server`` value, in order, without trailing slashes."""
    urls = [part.strip().rstrip("/") for part in value.split(",")]
    return [url for url in urls if url]


def primary(value: str) -> str:
    """The first URL of a ``--server`` value (the one a single-server caller uses)."""
    urls = server_urls(value)
    return urls[0] if urls else value


class FailoverTransport(httpx.BaseTransport):
    """An ``httpx`` transport over several origins: the last that answered first, the others in
    turn when a connection cannot be made. ``transport`` keywords (``verify``...) go to the one
    ``httpx.HTTPTransport`` that pools connections to them all."""

    def __init__(self, urls: Sequence[str], **transport: Any) -> None:
        if not urls:
            raise ValueError("no server URL")
        self.origins = [httpx.URL(url) for url in urls]
        self._transport = httpx.HTTPTransport(**transport)
        self._current = 0
        self._lock = threading.Lock()

    @property
    def current(self) -> str:
        """The origin requests go to now."""
        return str(self.origins[self._current]).rstrip("/")

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            first = self._current
        failure: Exception | None = None
        for step in range(len(self.origins)):
            index = (first + step) % len(self.origins)
            origin = self.origins[index]
            request.url = request.url.copy_with(
                scheme=origin.scheme, host=origin.host, port=origin.port
            )
            request.headers["Host"] = origin.netloc.decode("ascii")
            try:
                response = self._transport.handle_request(request)
            except _UNREACHED as exc:
                failure = exc
                continue
            with self._lock:
                self._current = index
            return response
        assert failure is not None
        raise failure

    def close(self) -> None:
        self._transport.close()


def client_settings(server: str, verify: Any, **client: Any) -> dict[str, Any]:
    """Keywords for ``httpx.Client`` talking to ``server`` (one URL, or several with commas):
    a list gets a ``FailoverTransport`` carrying ``verify``."""
    urls = server_urls(server)
    if len(urls) <= 1:
        return {"base_url": primary(server), "verify": verify, **client}
    return {"base_url": urls[0], "transport": FailoverTransport(urls, verify=verify), **client}
