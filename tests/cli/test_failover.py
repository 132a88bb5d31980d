"""Several servers behind one client (net/failover.py): a request that cannot connect goes
to the next server, once; the one that answered is used from then on; an answer of any status
is the answer; with every server down the connection error is raised."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from shoal.net.failover import FailoverTransport, client_settings, primary, server_urls


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, str, str, bytes]] = []  # method, path, Host, body
        self.status = 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size) if size else b""
        self.server.seen.append((self.command, self.path, self.headers["Host"], body))
        self.send_response(self.server.status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = _answer


@pytest.fixture
def live() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def dead() -> Iterator[str]:
    """A loopback port nothing listens on (bound, so no one else takes it meanwhile)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_request_that_cannot_connect_goes_to_the_next_server_once(
    live: Recorder, dead: str
) -> None:
    transport = FailoverTransport([dead, live.url])
    with httpx.Client(base_url=dead, transport=transport) as client:
        answer = client.post("/api/v1/jobs", content=b"spec")
        assert answer.status_code == 200 and answer.text == "ok"
        assert transport.current == live.url
        client.get("/api/v1/health")
    host = live.url.removeprefix("http://")
    assert live.seen == [
        ("POST", "/api/v1/jobs", host, b"spec"),  # sent once, with the live server's Host
        ("GET", "/api/v1/health", host, b""),
    ]


def test_an_answer_of_any_status_is_not_failed_over(live: Recorder, dead: str) -> None:
    other = Recorder()
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        live.status = 500
        transport = FailoverTransport([live.url, other.url])
        with httpx.Client(base_url=live.url, transport=transport) as client:
            assert client.get("/x").status_code == 500
        assert len(live.seen) == 1 and other.seen == []  # it may have acted: not sent again
    finally:
        other.shutdown()
        other.server_close()
        thread.join(5)


def test_with_every_server_down_the_connection_error_is_raised(dead: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        other = f"http://127.0.0.1:{sock.getsockname()[1]}"
        transport = FailoverTransport([dead, other])
        with (
            httpx.Client(base_url=dead, transport=transport) as client,
            pytest.raises(httpx.ConnectError),
        ):
            client.get("/x")


def test_server_lists_are_read_from_commas() -> None:
    assert server_urls(" https://a:8443/, https://b:8443 ,") == [
        "https://a:8443",
        "https://b:8443",
    ]
    assert primary("https://a:8443,https://b:8443") == "https://a:8443"
    assert client_settings("https://a:8443", True, timeout=1.0) == {
        "base_url": "https://a:8443",
        "verify": True,
        "timeout": 1.0,
    }
    several = client_settings("https://a:8443,https://b:8443", True)
    assert isinstance(several["transport"], FailoverTransport)
    assert several["base_url"] == "https://a:8443"
